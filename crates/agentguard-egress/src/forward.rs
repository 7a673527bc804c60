//! One request through a credential route, from the client's head to its `egress_route`
//! event.
//!
//! In this order: the target (which route, the path; `route_target.rs`), the route granted,
//! the method, the path inside the route's prefixes, the declared body size. Only then is
//! the upstream reached, as netpin reaches it (pinned public DNS, the dial deadline, verified
//! TLS), and sent the client's request with the hop-by-hop headers, `Host`, `Authorization`,
//! `Proxy-Authorization`, `Cookie`, `Range`, the method-override and URL-rewrite headers and
//! the route's own header dropped (`route_headers.rs`), and the proxy's `Host`, credential and
//! `Accept-Encoding: identity` set. The response comes back as it streams, under the status
//! code's canonical reason phrase (never the upstream's), without cookies, with the secret
//! replaced wherever it occurs in any form `redact.rs` knows; an encoded body or a 206 is
//! refused before a byte is sent (redaction could not see into it, or it is a piece);
//! redirects are passed back with a `Location` inside the upstream base pointing at the route.
//! One request per connection; its event is recorded when it ends.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use agentguard_audit::{Decision, Event};
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use crate::head::{check_route_head, parse_head};
use crate::live::{Reach, Registered, Rules, Watch};
use crate::redact::Redactor;
use crate::response::{Refusal, RefusalKind, refuse};
use crate::route::Route;
use crate::route_body::{Capped, Counters, Prefixed, RouteBody, Streaming};
use crate::route_headers::{check_answer, request_headers, response_headers};
use crate::route_target::{as_sent, parse_route_target, path_allowed};
use crate::shared::{Client, Shared};
use crate::upstream::{connect, too_large, upstream_failed};

/// What the event of one route request records.
#[derive(Debug)]
struct Outcome {
    route: String,
    path: String,
    method: String,
    status: u16,
    refusal: Option<Refusal>,
    dialed: Option<String>,
    /// The method or path was outside the route: let through by an observe run.
    observed: bool,
}

/// What the service of one connection shares with its event.
struct Request1 {
    shared: Arc<Shared>,
    /// The rules it is decided by.
    rules: Arc<Rules>,
    watch: Watch,
    /// Its place among the open connections, once its route granted it.
    registered: Mutex<Option<Registered>>,
    target: String,
    counters: Arc<Counters>,
    outcome: Mutex<Outcome>,
}

/// Serves the one route request on `client`, whose first bytes (`read`: the head, `head_len`
/// bytes, and whatever followed it) were already read; records its event.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    rules: Arc<Rules>,
    client: impl Client,
    (read, head_len): (Vec<u8>, usize),
    target: String,
    peer: String,
    watch: Watch,
) {
    let started = Instant::now();
    // A head hyper would answer with its own bare 400 is refused here, with the reason
    // headers every refusal carries.
    if let Err(message) = check_route_head(&read[..head_len]) {
        let (route, path) = as_sent(&target);
        let method = parse_head(&read[..head_len])
            .map(|line| line.method.to_owned())
            .unwrap_or_default();
        let refusal = Refusal::new(RefusalKind::MalformedRequest, message);
        let event = Event::egress_route(
            refusal.kind.decision(),
            refusal.kind.code(),
            &route,
            &path,
            &peer,
        )
        .data("method", method.as_str())
        .data("status", refusal.kind.status())
        .data("bytes_up", 0u64)
        .data("bytes_down", 0u64)
        .data("duration_ms", started.elapsed().as_millis() as u64)
        .data("message", refusal.audit_message())
        .data("generation", rules.generation);
        shared.record(event).await;
        return refuse(client, &refusal).await;
    }
    let request = Arc::new(Request1 {
        shared: Arc::clone(&shared),
        rules,
        watch: watch.clone(),
        registered: Mutex::new(None),
        target,
        counters: Arc::new(Counters::default()),
        outcome: Mutex::new(Outcome {
            route: String::new(),
            path: String::new(),
            method: String::new(),
            status: 0,
            refusal: None,
            dialed: None,
            observed: false,
        }),
    });
    let service = {
        let request = Arc::clone(&request);
        hyper::service::service_fn(move |req| {
            let request = Arc::clone(&request);
            async move { Ok::<_, Infallible>(answer(&request, req).await) }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .serve_connection(TokioIo::new(Prefixed::new(read, client)), service);
    let ended = tokio::select! {
        () = watch.token.cancelled() => Some(watch.reason("shutdown")),
        served = connection => served.err().map(|_| "client_gone"),
    };
    let event = event(&request, &peer, started, ended);
    shared.record(event).await;
}

/// The event of the request, once it ended (`ended`: why the connection ended early).
fn event(request: &Request1, peer: &str, started: Instant, ended: Option<&'static str>) -> Event {
    let outcome = request
        .outcome
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let (decision, reason, message) = match &outcome.refusal {
        Some(r) => (
            r.kind.decision(),
            r.kind.code(),
            Some(r.audit_message().to_owned()),
        ),
        // The head passed the proxy's own parser but not hyper's, which answered 400.
        None if outcome.status == 0 => (
            Decision::Deny,
            RefusalKind::MalformedRequest.code(),
            Some("the request could not be read as HTTP/1.1".to_owned()),
        ),
        None if request.counters.broken.load(Ordering::Relaxed) => {
            (Decision::Allow, "upstream_broken", None)
        }
        None if outcome.observed && ended.is_none() => (Decision::Allow, "observed", None),
        None => (Decision::Allow, ended.unwrap_or("ok"), None),
    };
    let path = if outcome.path.is_empty() {
        "/"
    } else {
        &outcome.path
    };
    let mut event = Event::egress_route(decision, reason, &outcome.route, path, peer)
        .data("method", outcome.method.as_str())
        .data("status", outcome.status)
        .data("bytes_up", request.counters.up.load(Ordering::Relaxed))
        .data("bytes_down", request.counters.down.load(Ordering::Relaxed))
        .data("duration_ms", started.elapsed().as_millis() as u64)
        .data("generation", request.rules.generation);
    if let Some(dialed) = &outcome.dialed {
        event = event.data("dialed", dialed.as_str());
    }
    if let Some(message) = message {
        event = event.data("message", message);
    }
    tracing::info!(client = %crate::escape(peer), route = %crate::escape(&outcome.route), status = outcome.status, reason, "egress route request");
    event
}

/// The answer to the request: a refusal, or the upstream's response.
async fn answer(request: &Request1, req: Request<Incoming>) -> Response<RouteBody> {
    let method = req.method().as_str().to_owned();
    request.set(|o| o.method = method);
    match forward(request, req).await {
        Ok(response) => {
            request.set(|o| o.status = response.status().as_u16());
            response
        }
        Err(refusal) => refused(request, refusal),
    }
}

impl Request1 {
    fn set(&self, change: impl FnOnce(&mut Outcome)) {
        change(&mut self.outcome.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Joins the open connections, checked again at each reload (an observed request, outside
    /// its route, never is).
    fn register(&self, route: &Route, method: &http::Method, path: &str) {
        let observed = self
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observed;
        let reach = if observed {
            Reach::Observed
        } else {
            Reach::Route {
                name: route.name.clone(),
                upstream: route.upstream(),
                method: method.clone(),
                path: path.to_owned(),
            }
        };
        let registered = self
            .shared
            .live
            .register(reach, self.rules.generation, &self.watch);
        *self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(registered);
    }
}

/// The refusal as the client reads it (the same head and text as a CONNECT refusal).
fn refused(request: &Request1, refusal: Refusal) -> Response<RouteBody> {
    let status = StatusCode::from_u16(refusal.kind.status()).unwrap_or(StatusCode::FORBIDDEN);
    let mut response = Response::new(RouteBody::Full(Some(Bytes::from(refusal.body()))));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let text = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static("?"));
    headers.insert("x-agentguard-reason", text(refusal.kind.code()));
    headers.insert("x-agentguard-decision", text(refusal.decision_word()));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if refusal.kind == RefusalKind::MethodNotAllowed {
        let allow = request
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .route
            .clone();
        let methods = request
            .rules
            .routes
            .get(&allow)
            .map_or("CONNECT".to_owned(), |r| r.methods().join(", "));
        headers.insert(header::ALLOW, text(&methods));
    }
    request.set(|o| {
        o.status = refusal.kind.status();
        o.refusal = Some(refusal);
    });
    response
}

/// Checks the request, then forwards it (see the module docs).
async fn forward(
    request: &Request1,
    req: Request<Incoming>,
) -> Result<Response<RouteBody>, Refusal> {
    let shared = &request.shared;
    let (route, path) = as_sent(&request.target);
    request.set(|o| {
        o.route = route;
        o.path = path;
    });
    let target = parse_route_target(&request.target, shared.route_port)
        .map_err(|e| e.refusal(req.method()))?;
    request.set(|o| {
        o.route = target.route.to_owned();
        o.path = target.rest.to_owned();
    });
    let routes = &request.rules.routes;
    let Some(route) = routes.get(target.route) else {
        return Err(Refusal::new(
            RefusalKind::RouteNotAllowed,
            format!(
                "this run was granted no route named {:?}; its routes are: {}",
                target.route,
                routes.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    };
    let observe = shared.limits.observe;
    let method_ok = route.methods.contains(req.method());
    let path_ok = path_allowed(&route.paths, &target.decoded);
    if observe && !(method_ok && path_ok) {
        // The route's method or path would refuse it; an observe run lets it through.
        request.set(|o| o.observed = true);
    }
    if !method_ok && !observe {
        return Err(Refusal::new(
            RefusalKind::MethodNotAllowed,
            format!(
                "route {} allows {}, not {}",
                route.name,
                route.methods().join(", "),
                req.method()
            ),
        ));
    }
    if !path_ok && !observe {
        return Err(Refusal::new(
            RefusalKind::PathNotAllowed,
            format!(
                "route {} allows the paths {}, not {:?}",
                route.name,
                route.paths.join(", "),
                target.decoded
            ),
        ));
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > route.max_request_bytes) {
        return Err(too_large(route));
    }
    request.register(route, req.method(), &target.decoded);
    let mut uri = format!("{}{}", route.base_path, target.rest);
    if uri.is_empty() {
        uri.push('/');
    }
    if let Some(query) = target.query {
        uri.push('?');
        uri.push_str(query);
    }
    exchange(request, route, req, uri).await
}

/// Sends the request upstream and turns its response into the client's.
async fn exchange(
    request: &Request1,
    route: &Route,
    req: Request<Incoming>,
    uri: String,
) -> Result<Response<RouteBody>, Refusal> {
    let shared = &request.shared;
    let (mut sender, driver, dialed) = connect(shared, &request.rules, route).await?;
    request.set(|o| o.dialed = Some(dialed.to_string()));
    let (parts, body) = req.into_parts();
    let mut upstream = Request::new(Capped {
        inner: body,
        max: route.max_request_bytes,
        counters: Arc::clone(&request.counters),
    });
    *upstream.method_mut() = parts.method;
    *upstream.uri_mut() = uri.parse().map_err(|e| upstream_failed(route, &e))?;
    *upstream.headers_mut() = request_headers(parts.headers, route);
    let limit = shared.limits.response_timeout;
    let sent = tokio::time::timeout(limit, sender.send_request(upstream)).await;
    let response = match sent {
        Ok(Ok(response)) => response,
        Err(_) => {
            driver.abort();
            return Err(Refusal::new(
                RefusalKind::ResponseTimeout,
                format!(
                    "the upstream of route {} sent no response within {limit:?}",
                    route.name
                ),
            ));
        }
        Ok(Err(e)) => {
            driver.abort();
            if request.counters.over_cap.load(Ordering::Relaxed) {
                return Err(too_large(route));
            }
            return Err(upstream_failed(route, &e));
        }
    };
    if let Err(refusal) = check_answer(route, &response) {
        driver.abort();
        return Err(refusal);
    }
    let (mut parts, body) = response.into_parts();
    parts.headers = response_headers(parts.headers, route, shared.route_port);
    // The upstream's own reason phrase (hyper keeps a non-canonical one as an extension and
    // would write it back) never passes: the client reads the code's canonical phrase.
    parts.extensions.clear();
    let body = RouteBody::Upstream(Box::new(Streaming {
        inner: body,
        redactor: Redactor::new(route.redact.clone()),
        done: false,
        counters: Arc::clone(&request.counters),
        driver,
    }));
    Ok(Response::from_parts(parts, body))
}

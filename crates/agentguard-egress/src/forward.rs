//! One request through a credential route, from the client's head to its `egress_route`
//! event.
//!
//! In this order: the target (which route, the path; `route_target.rs`), the route granted,
//! the method, the path inside the route's prefixes, the declared body size. Only then is
//! the upstream reached, as netpin reaches it (pinned public DNS, the dial deadline, verified
//! TLS), and sent the client's request with the hop-by-hop headers, `Host`, `Authorization`,
//! `Proxy-Authorization`, `Cookie` and the route's own header dropped, and the proxy's `Host`,
//! credential and `Accept-Encoding: identity` set. The response comes back as it streams,
//! with the secret replaced wherever it occurs, a compressed body refused (redaction could
//! not see into it), redirects passed back with a `Location` inside the upstream base
//! pointing at the route. One request per connection; its event is recorded when it ends.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use agentguard_audit::{Decision, Event, error_chain};
use agentguard_netpin::{DialError, FetchError, PinError};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use crate::connection::record;
use crate::redact::{Redactor, redact_all};
use crate::response::{Refusal, RefusalKind};
use crate::route::Route;
use crate::route_body::{Capped, Counters, Prefixed, RouteBody, Streaming};
use crate::route_target::{TargetError, parse_route_target, path_allowed, rewrite_location};
use crate::shared::{Client, Shared};

/// What the event of one route request records.
#[derive(Debug)]
struct Outcome {
    route: String,
    path: String,
    method: String,
    status: u16,
    refusal: Option<Refusal>,
    dialed: Option<String>,
}

/// What the service of one connection shares with its event.
struct Request1 {
    shared: Arc<Shared>,
    target: String,
    counters: Arc<Counters>,
    outcome: Mutex<Outcome>,
}

/// Serves the one route request on `client`, whose first bytes (`read`, the head and
/// whatever followed it) were already read; records its event.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    client: impl Client,
    read: Vec<u8>,
    target: String,
    peer: String,
    cancel: CancellationToken,
) {
    let started = Instant::now();
    let request = Arc::new(Request1 {
        shared: Arc::clone(&shared),
        target,
        counters: Arc::new(Counters::default()),
        outcome: Mutex::new(Outcome {
            route: String::new(),
            path: String::new(),
            method: String::new(),
            status: 0,
            refusal: None,
            dialed: None,
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
        () = cancel.cancelled() => Some("shutdown"),
        served = connection => served.err().map(|_| "client_gone"),
    };
    let event = event(&request, &peer, started, ended);
    record(&shared, event).await;
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
        .data("duration_ms", started.elapsed().as_millis() as u64);
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
            .shared
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
    let target = parse_route_target(&request.target, shared.route_port).map_err(|e| match e {
        TargetError::NotLocal(m) => Refusal::new(
            RefusalKind::MethodNotAllowed,
            format!("{} {m}", req.method()),
        ),
        TargetError::Malformed(m) => Refusal::new(RefusalKind::MalformedTarget, m),
        TargetError::Path(m) => Refusal::new(RefusalKind::PathNotAllowed, m),
    })?;
    request.set(|o| {
        o.route = target.route.to_owned();
        o.path = target.rest.to_owned();
    });
    let Some(route) = shared.routes.get(target.route) else {
        return Err(Refusal::new(
            RefusalKind::RouteNotAllowed,
            format!(
                "this run was granted no route named {:?}; its routes are: {}",
                target.route,
                shared.routes.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    };
    if !route.methods.contains(req.method()) {
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
    if !path_allowed(&route.paths, &target.decoded) {
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

fn too_large(route: &Route) -> Refusal {
    Refusal::new(
        RefusalKind::BodyTooLarge,
        format!(
            "the request body exceeds route {}'s cap of {} bytes",
            route.name, route.max_request_bytes
        ),
    )
}

/// Connects to the upstream, sends the request, and turns its response into the client's.
async fn exchange(
    request: &Request1,
    route: &Route,
    req: Request<Incoming>,
    uri: String,
) -> Result<Response<RouteBody>, Refusal> {
    let shared = &request.shared;
    let host = &route.upstream.host;
    let connect = route.tls.connect(
        &route.policy,
        shared.resolver.as_ref(),
        host,
        route.upstream.port,
    );
    let connected = tokio::time::timeout(shared.limits.connect_timeout, connect)
        .await
        .map_err(|_| {
            Refusal::new(
                RefusalKind::DialTimeout,
                format!(
                    "the upstream of route {} was not reached within {:?}",
                    route.name, shared.limits.connect_timeout
                ),
            )
        })?
        .map_err(|e| connect_refusal(route, &e))?;
    request.set(|o| o.dialed = Some(connected.dialed.to_string()));
    let upstream_failed = |e: &(dyn std::error::Error + 'static)| {
        Refusal::new(
            RefusalKind::UpstreamFailed,
            format!(
                "the HTTP exchange with the upstream of route {} failed",
                route.name
            ),
        )
        .with_detail(error_chain(e))
    };
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(connected.stream))
            .await
            .map_err(|e| upstream_failed(&e))?;
    let driver = tokio::spawn(connection).abort_handle();
    let (parts, body) = req.into_parts();
    let mut upstream = Request::new(Capped {
        inner: body,
        max: route.max_request_bytes,
        counters: Arc::clone(&request.counters),
    });
    *upstream.method_mut() = parts.method;
    *upstream.uri_mut() = uri.parse().map_err(|e| upstream_failed(&e))?;
    *upstream.headers_mut() = request_headers(parts.headers, route);
    let limit = shared.limits.response_timeout;
    let response = match tokio::time::timeout(limit, sender.send_request(upstream)).await {
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
        Ok(Err(_)) if request.counters.over_cap.load(Ordering::Relaxed) => {
            driver.abort();
            return Err(too_large(route));
        }
        Ok(Err(e)) => {
            driver.abort();
            return Err(upstream_failed(&e));
        }
        Ok(Ok(response)) => response,
    };
    let encoding = response.headers().get(header::CONTENT_ENCODING);
    if encoding.is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity")) {
        driver.abort();
        return Err(Refusal::new(
            RefusalKind::EncodedResponse,
            format!(
                "the upstream of route {} answered with a compressed body although asked for identity; the secret could not be redacted in it",
                route.name
            ),
        ));
    }
    let (mut parts, body) = response.into_parts();
    parts.headers = response_headers(parts.headers, route, shared.route_port);
    let body = RouteBody::Upstream(Box::new(Streaming {
        inner: body,
        redactor: Redactor::new(route.redact.clone()),
        done: false,
        counters: Arc::clone(&request.counters),
        driver,
    }));
    Ok(Response::from_parts(parts, body))
}

/// The refusal for an upstream netpin would not or could not reach.
fn connect_refusal(route: &Route, error: &FetchError) -> Refusal {
    let name = route.upstream.host.to_string();
    let (kind, message) = match error {
        FetchError::Denied(d) => (
            RefusalKind::Denied(d.reason),
            format!(
                "the upstream {name} of route {} may not be reached (only public addresses and the route's allowed ranges are; the addresses are in the audit log)",
                route.name
            ),
        ),
        FetchError::Pin(PinError::TooManyAnswers { limit, .. }) => (
            RefusalKind::TooManyAnswers,
            format!("{name} resolved to more than {limit} addresses"),
        ),
        FetchError::Pin(_) => (
            RefusalKind::DnsFailure,
            format!("the DNS lookup of {name} failed"),
        ),
        FetchError::Dial(DialError::Timeout { .. }) | FetchError::Timeout { .. } => (
            RefusalKind::DialTimeout,
            format!("{name} was not reached in time"),
        ),
        FetchError::Tls { .. } => (
            RefusalKind::TlsFailed,
            format!(
                "the TLS handshake with {name} failed (its certificate is not valid for the name, or not from a trusted CA)"
            ),
        ),
        _ => (
            RefusalKind::ConnectFailed,
            format!("could not connect to {name}"),
        ),
    };
    Refusal::new(kind, message).with_detail(error_chain(error))
}

/// Hop-by-hop headers, and those the `Connection` header names.
fn hop_by_hop(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut names: Vec<HeaderName> = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authenticate",
        "proxy-authorization",
        "content-length",
    ]
    .iter()
    .map(|n| HeaderName::from_static(n))
    .collect();
    for value in headers.get_all(header::CONNECTION) {
        for token in value.to_str().unwrap_or_default().split(',') {
            if let Ok(name) = HeaderName::try_from(token.trim()) {
                names.push(name);
            }
        }
    }
    names
}

/// The client's headers as sent upstream (see the module docs).
fn request_headers(mut headers: HeaderMap, route: &Route) -> HeaderMap {
    for name in hop_by_hop(&headers) {
        headers.remove(name);
    }
    for name in [
        header::HOST,
        header::AUTHORIZATION,
        header::COOKIE,
        header::EXPECT,
        route.header.clone(),
    ] {
        headers.remove(name);
    }
    if let Ok(host) = HeaderValue::try_from(route.upstream.authority()) {
        headers.insert(header::HOST, host);
    }
    headers.insert(route.header.clone(), route.value.clone());
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if !headers.contains_key(header::USER_AGENT) {
        let agent = concat!("agentguard/", env!("CARGO_PKG_VERSION"));
        headers.insert(header::USER_AGENT, HeaderValue::from_static(agent));
    }
    headers
}

/// The upstream's headers as sent back: hop-by-hop and the length dropped (redaction may
/// change it), every value redacted, a `Location` inside the base pointed at the route.
fn response_headers(mut headers: HeaderMap, route: &Route, port: u16) -> HeaderMap {
    for name in hop_by_hop(&headers) {
        headers.remove(name);
    }
    let mut out = HeaderMap::with_capacity(headers.len());
    let origin = format!("https://{}", route.upstream.authority());
    let route_path = format!("/{}", route.name);
    let route_url = format!("http://127.0.0.1:{port}{route_path}");
    for (name, value) in &headers {
        let mut bytes = redact_all(&route.redact, value.as_bytes());
        if name == header::LOCATION
            && let Ok(text) = std::str::from_utf8(&bytes)
            && let Some(local) =
                rewrite_location(text, &origin, &route.base_path, &route_url, &route_path)
        {
            bytes = local.into_bytes();
        }
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            out.append(name.clone(), value);
        }
    }
    out
}

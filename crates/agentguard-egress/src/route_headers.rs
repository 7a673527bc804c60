//! The headers of a route request: what of the client's goes upstream, and what of the
//! upstream's comes back (DESIGN.md, "Credentials that never enter the sandbox").
//!
//! The upstream is hostile: the client's headers that would make it act outside the route's
//! `methods` and `paths` (method override, URL rewrite) or answer in pieces (`Range`) never go
//! up, and its cookies never come back (a session opened with the credential would outlive
//! the run). Which codings may come back is decided in `forward.rs` before a byte is sent.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use http::{Response, StatusCode};

use crate::redact::redact_all;
use crate::response::{Refusal, RefusalKind};
use crate::route::Route;
use crate::route_target::rewrite_location;

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

/// Client headers never sent upstream, besides the hop-by-hop ones: the credential's own
/// places, cookies, and those that would make an upstream act outside the route's `methods`
/// and `paths` or answer in pieces.
pub const DROPPED_REQUEST_HEADERS: &[&str] = &[
    "host",
    "authorization",
    "cookie",
    "expect",
    "range",
    "if-range",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
];

/// Upstream headers never passed back, besides the hop-by-hop ones.
pub const DROPPED_RESPONSE_HEADERS: &[&str] = &["set-cookie", "set-cookie2"];

/// The client's headers as sent upstream (see the module docs).
pub(crate) fn request_headers(mut headers: HeaderMap, route: &Route) -> HeaderMap {
    for name in hop_by_hop(&headers) {
        headers.remove(name);
    }
    for name in DROPPED_REQUEST_HEADERS {
        headers.remove(*name);
    }
    headers.remove(route.header.clone());
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
pub(crate) fn response_headers(mut headers: HeaderMap, route: &Route, port: u16) -> HeaderMap {
    for name in hop_by_hop(&headers) {
        headers.remove(name);
    }
    for name in DROPPED_RESPONSE_HEADERS {
        headers.remove(*name);
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

/// Refuses an answer redaction could not see into, or one that returns the body in pieces:
/// any `Content-Encoding` other than `identity` (every header, every listed coding), any
/// transfer-coding other than `chunked`, and `206 Partial Content` (the client's `Range` is
/// never sent, so only a hostile upstream answers with a piece).
pub(crate) fn check_answer<B>(route: &Route, response: &Response<B>) -> Result<(), Refusal> {
    let headers = response.headers();
    let only = |name: header::HeaderName, allowed: &str| {
        headers.get_all(&name).iter().all(|value| {
            value.to_str().is_ok_and(|text| {
                text.split(',')
                    .map(str::trim)
                    .all(|coding| coding.eq_ignore_ascii_case(allowed))
            })
        })
    };
    let encoded = |what: &str| {
        Refusal::new(
            RefusalKind::EncodedResponse,
            format!(
                "the upstream of route {} answered with {what}; the secret could not be redacted in it",
                route.name
            ),
        )
    };
    if !only(header::CONTENT_ENCODING, "identity") {
        return Err(encoded(
            "a content coding other than identity although asked for identity",
        ));
    }
    if !only(header::TRANSFER_ENCODING, "chunked") {
        return Err(encoded("a transfer coding other than chunked"));
    }
    if response.status() == StatusCode::PARTIAL_CONTENT {
        return Err(Refusal::new(
            RefusalKind::PartialResponse,
            format!(
                "the upstream of route {} answered 206 Partial Content, which was not asked for (the client's Range is never sent)",
                route.name
            ),
        ));
    }
    Ok(())
}

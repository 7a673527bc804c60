//! Reaching a route's upstream as netpin reaches it (pinned public DNS, the dial deadline,
//! verified TLS, then the HTTP/1.1 handshake), and the refusal for each way it fails.

use std::net::SocketAddr;

use agentguard_audit::error_chain;
use agentguard_netpin::{DialError, FetchError, PinError};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::task::AbortHandle;

use crate::live::Rules;
use crate::response::{Refusal, RefusalKind};
use crate::route::Route;
use crate::route_body::Capped;
use crate::shared::Shared;

/// A verified connection to the route's upstream, its HTTP/1.1 handshake done: the sender
/// the connection task's handle, and the address dialed.
pub(crate) async fn connect(
    shared: &Shared,
    rules: &Rules,
    route: &Route,
) -> Result<(SendRequest<Capped>, AbortHandle, SocketAddr), Refusal> {
    let host = &route.upstream.host;
    let connect = route.tls.connect(
        &route.policy,
        rules.resolver.as_ref(),
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
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(connected.stream))
            .await
            .map_err(|e| upstream_failed(route, &e))?;
    Ok((
        sender,
        tokio::spawn(connection).abort_handle(),
        connected.dialed,
    ))
}

pub(crate) fn upstream_failed(route: &Route, e: &(dyn std::error::Error + 'static)) -> Refusal {
    Refusal::new(
        RefusalKind::UpstreamFailed,
        format!(
            "the HTTP exchange with the upstream of route {} failed",
            route.name
        ),
    )
    .with_detail(error_chain(e))
}

/// The refusal for a body over the route's cap.
pub(crate) fn too_large(route: &Route) -> Refusal {
    Refusal::new(
        RefusalKind::BodyTooLarge,
        format!(
            "the request body exceeds route {}'s cap of {} bytes",
            route.name, route.max_request_bytes
        ),
    )
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

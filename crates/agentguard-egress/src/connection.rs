//! One connection, from its first byte to its close event.
//!
//! In this order: read the request head (with a deadline and a size limit), parse it and the
//! target once, check the port, then the allowlist, then resolve once through netpin and check
//! every answer, refuse the proxy's own address, dial the checked addresses, record the
//! decision, and only then answer `200 Connection Established` and forward what the client
//! sent after its head. Every refusal is recorded, answered with its status and reason code,
//! and the connection closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use agentguard_audit::{AuditSink, Decision, Event};
use agentguard_netpin::{DialError, PinError, Resolve, dial, pin};
use agentguard_policy::{Authority, TargetPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::builder::Limits;
use crate::head::{head_end, parse_head};
use crate::response::{ESTABLISHED, Refusal, RefusalKind, refuse};
use crate::tunnel;

/// What every connection of one proxy shares.
pub(crate) struct Shared {
    pub(crate) policy: TargetPolicy,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) limits: Limits,
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    pub(crate) local_addr: SocketAddr,
    pub(crate) slots: Arc<Semaphore>,
}

/// A decided, dialed CONNECT: what the tunnel needs and the close event records.
struct Tunnel {
    /// The canonical `host:port`.
    target: String,
    /// The allowlist pattern that matched.
    rule: String,
    upstream: TcpStream,
    dialed: SocketAddr,
}

/// A refused CONNECT, with the target when it could be parsed.
struct Refused {
    target: Option<String>,
    refusal: Refusal,
}

impl Refused {
    fn new(target: Option<&str>, kind: RefusalKind, message: impl Into<String>) -> Refused {
        Refused {
            target: target.map(str::to_owned),
            refusal: Refusal::new(kind, message),
        }
    }
}

/// Records an event off the async threads; the caller waits only as long as the sink's
/// durability requires. Returns false when the event could not be recorded.
async fn record(shared: &Shared, event: Event) -> bool {
    let Some(sink) = shared.audit.clone() else {
        return true;
    };
    match tokio::task::spawn_blocking(move || sink.record(event)).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "audit event could not be recorded");
            false
        }
        Err(e) => {
            tracing::error!(error = %e, "audit task failed");
            false
        }
    }
}

fn refusal_event(target: &str, client: &str, refusal: &Refusal) -> Event {
    Event::egress_connect(refusal.kind.decision(), refusal.kind.code(), target, client)
        .data("status", refusal.kind.status())
        .data("message", refusal.message.as_str())
}

/// Answers a connection over the cap at once with 503, and records it.
pub(crate) async fn over_capacity(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr) {
    let refusal = Refusal::new(
        RefusalKind::TooManyConnections,
        format!(
            "the proxy already handles {} connections",
            shared.limits.max_connections
        ),
    );
    record(&shared, refusal_event("", &peer.to_string(), &refusal)).await;
    refuse(stream, &refusal).await;
}

/// Reads the request head: `Ok((buffer, head length))`, or the refusal to send (`None`
/// when the client went away).
async fn read_head(
    stream: &mut TcpStream,
    limits: &Limits,
) -> Result<(Vec<u8>, usize), Option<Refusal>> {
    let deadline = tokio::time::Instant::now() + limits.head_timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut searched = 0;
    loop {
        let complete = head_end(&buf, searched);
        if complete.unwrap_or(buf.len()) > limits.max_head_bytes {
            return Err(Some(Refusal::new(
                RefusalKind::HeadTooLarge,
                format!("the request head exceeds {} bytes", limits.max_head_bytes),
            )));
        }
        if let Some(end) = complete {
            return Ok((buf, end));
        }
        searched = buf.len();
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => {
                return Err(Some(Refusal::new(
                    RefusalKind::HeadTimeout,
                    format!(
                        "the request head was not complete within {:?}",
                        limits.head_timeout
                    ),
                )));
            }
            Ok(Ok(0)) | Ok(Err(_)) => return Err(None),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The printable form of a target that could not be parsed, for the audit log.
fn raw_target(buf: &[u8]) -> String {
    let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
    let text = String::from_utf8_lossy(line);
    text.split(' ')
        .nth(1)
        .unwrap_or_default()
        .chars()
        .take(512)
        .collect()
}

/// Serves one connection: head, decision, tunnel, close event.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    mut client: TcpStream,
    peer: SocketAddr,
    _slot: OwnedSemaphorePermit,
    tunnels: CancellationToken,
) {
    let started = Instant::now();
    let client_text = peer.to_string();
    let (buf, end) = match read_head(&mut client, &shared.limits).await {
        Ok(head) => head,
        Err(None) => return,
        Err(Some(refusal)) => {
            let event = Event::egress_connect(
                refusal.kind.decision(),
                refusal.kind.code(),
                "",
                &client_text,
            )
            .data("status", refusal.kind.status());
            record(&shared, event).await;
            return refuse(client, &refusal).await;
        }
    };
    let tunnel = match decide(&shared, &buf[..end]).await {
        Ok(tunnel) => tunnel,
        Err(Refused { target, refusal }) => {
            let target = target.unwrap_or_else(|| raw_target(&buf));
            tracing::info!(client = %peer, %target, reason = refusal.kind.code(), status = refusal.kind.status(), "egress refused");
            record(&shared, refusal_event(&target, &client_text, &refusal)).await;
            return refuse(client, &refusal).await;
        }
    };
    let Tunnel {
        target,
        rule,
        mut upstream,
        dialed,
    } = tunnel;
    let allowed = Event::egress_connect(Decision::Allow, "ok", &target, &client_text)
        .data("status", 200u16)
        .data("rule", rule.as_str())
        .data("dialed", dialed.to_string());
    if !record(&shared, allowed).await {
        // Never open a tunnel that the audit log does not show.
        return refuse(
            client,
            &Refusal::new(
                RefusalKind::AuditFailed,
                "the decision could not be recorded in the audit log",
            ),
        )
        .await;
    }
    tracing::info!(client = %peer, %target, %rule, %dialed, "egress tunnel open");
    if client.write_all(ESTABLISHED).await.is_err() {
        return;
    }
    // Bytes the client sent after its head belong to the tunnel.
    if buf.len() > end && upstream.write_all(&buf[end..]).await.is_err() {
        return;
    }
    let stats = tunnel::run(client, upstream, shared.limits.idle_timeout, tunnels).await;
    let up = stats.up + (buf.len() - end) as u64;
    let close = Event::egress_close(stats.end.reason(), &target, &client_text)
        .data("bytes_up", up)
        .data("bytes_down", stats.down)
        .data("duration_ms", started.elapsed().as_millis() as u64)
        .data("dialed", dialed.to_string());
    record(&shared, close).await;
}

/// Everything between the head and the 200: parse, port, allowlist, resolve, check, dial.
async fn decide(shared: &Shared, head: &[u8]) -> Result<Tunnel, Refused> {
    let request =
        parse_head(head).map_err(|m| Refused::new(None, RefusalKind::MalformedRequest, m))?;
    if request.method != "CONNECT" {
        return Err(Refused::new(
            None,
            RefusalKind::MethodNotAllowed,
            format!(
                "method {} is not allowed; this proxy only tunnels CONNECT host:port",
                request.method
            ),
        ));
    }
    let authority = Authority::parse(request.target, None)
        .map_err(|e| Refused::new(None, RefusalKind::MalformedTarget, e.to_string()))?;
    let target = authority.to_string();
    let Authority { host, port } = authority;
    let refused = |kind, message: String| Refused::new(Some(&target), kind, message);
    let permit = shared
        .policy
        .check_target(&host, port)
        .map_err(|d| refused(RefusalKind::Denied(d.reason), d.message))?;
    let pinned = pin(
        shared.resolver.as_ref(),
        &shared.policy.addresses,
        &permit.name,
        shared.limits.max_answers,
    )
    .await
    .map_err(|e| match e {
        PinError::Denied(d) => refused(RefusalKind::Denied(d.reason), d.message),
        e @ PinError::TooManyAnswers { .. } => refused(RefusalKind::TooManyAnswers, e.to_string()),
        e => refused(RefusalKind::DnsFailure, agentguard_audit::error_chain(&e)),
    })?;
    let own = shared.local_addr;
    if let Some(ip) = pinned
        .addrs
        .iter()
        .find(|ip| port == own.port() && (**ip == own.ip() || own.ip().is_unspecified()))
    {
        return Err(refused(
            RefusalKind::Denied(agentguard_policy::Reason::NonPublicAddress),
            format!("{ip}:{port} is this proxy's own listening address"),
        ));
    }
    let (upstream, dialed) = dial(&pinned, port, shared.limits.connect_timeout)
        .await
        .map_err(|e| match e {
            DialError::Timeout { .. } => refused(RefusalKind::DialTimeout, e.to_string()),
            e => refused(RefusalKind::ConnectFailed, e.to_string()),
        })?;
    Ok(Tunnel {
        target,
        rule: permit.rule,
        upstream,
        dialed,
    })
}

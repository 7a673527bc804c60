//! One connection, from its first byte to its close event.
//!
//! In this order: read the request head (with a deadline and a size limit); decide (parse,
//! port, allowlist, pinned resolution, own address: `decide.rs`) within one overall deadline
//! that also bounds the dial; record the decision, and only then dial the checked addresses;
//! answer `200 Connection Established`; on port 443, check that the ClientHello asks for the
//! CONNECT host; forward what the client sent after its head; pump bytes; record the close.
//! Every refusal is recorded, answered with its status and reason code, and the connection
//! closed. Once an allow decision is recorded, every way the connection ends is recorded as
//! its close event. Shutdown (the `cancel` token, after the grace period) ends every stage.

use std::sync::Arc;
use std::time::Instant;

use agentguard_audit::{Decision, Event, error_chain};
use agentguard_netpin::{DialError, dial};
use agentguard_policy::Authority;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;

use crate::decide::{Allowed, Refused, decide, out_of_fds};
use crate::head::{head_end, parse_head};
use crate::hello::check_hello;
use crate::limits::{Limits, out_of_descriptors};
use crate::live::{Reach, Rules, Watch};
use crate::response::{ESTABLISHED, Refusal, RefusalKind, refuse};
use crate::shared::{Client, Close, Shared};
use crate::tunnel::{self, Timeouts};

fn refusal_event(target: &str, client: &str, refusal: &Refusal, generation: u64) -> Event {
    Event::egress_connect(refusal.kind.decision(), refusal.kind.code(), target, client)
        .data("status", refusal.kind.status())
        .data("message", refusal.audit_message())
        .data("generation", generation)
}

/// Records a refusal (made under the rules of `generation`; the current ones when `None`) and
/// answers it.
async fn refused(
    shared: &Shared,
    client: impl Client,
    (target, peer): (&str, &str),
    refusal: Refusal,
    generation: Option<u64>,
) {
    tracing::info!(client = %crate::escape(peer), target = %crate::escape(target), reason = refusal.kind.code(), status = refusal.kind.status(), "egress refused");
    let generation = generation.unwrap_or_else(|| shared.live.rules().generation);
    shared
        .record(refusal_event(target, peer, &refusal, generation))
        .await;
    refuse(client, &refusal).await;
}

/// Answers a connection over the cap (or out of descriptors) at once, and records it.
pub(crate) async fn over_capacity(
    shared: Arc<Shared>,
    stream: impl Client,
    peer: String,
    kind: RefusalKind,
) {
    let refusal = match kind {
        RefusalKind::OutOfDescriptors => out_of_fds("accepting the connection"),
        _ => Refusal::new(
            RefusalKind::TooManyConnections,
            match shared.limits.max_connections {
                Some(n) => format!("the proxy already handles {n} connections (its cap)"),
                None => "every connection of the process's budget is taken (it is shared by every proxy in this process)".to_owned(),
            },
        ),
    };
    refused(&shared, stream, ("", &peer), refusal, None).await;
}

/// Reads the request head: `Ok((buffer, head length))`, or the refusal to send (`None`
/// when the client went away).
async fn read_head(
    stream: &mut impl Client,
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

/// The request target when the head is a route request: any method but CONNECT, to a
/// proxy that serves routes.
fn route_target(rules: &Rules, head: &[u8]) -> Option<String> {
    if rules.routes.is_empty() {
        return None;
    }
    parse_head(head)
        .ok()
        .filter(|line| line.method != "CONNECT")
        .map(|line| line.target.to_owned())
}

/// A CONNECT the proxy stopped while deciding: its name may already be with the resolver (a
/// command can put data in a name under an allowed wildcard and exit), so every CONNECT read
/// leaves its event.
async fn stopped(shared: &Shared, client: impl Client, head: &[u8], peer: &str, generation: u64) {
    let refusal = Refusal::new(
        RefusalKind::ShuttingDown,
        "the proxy stopped before this request was decided",
    );
    let target = connect_target(head);
    refused(shared, client, (&target, peer), refusal, Some(generation)).await;
}

/// The canonical `host:port` of a CONNECT head, or its target as sent.
fn connect_target(head: &[u8]) -> String {
    parse_head(head)
        .ok()
        .and_then(|line| Authority::parse(line.target, None).ok())
        .map_or_else(|| raw_target(head), |a| a.to_string())
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

/// Serves one connection: head, decision, record, dial, tunnel, close event.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    mut client: impl Client,
    peer: String,
    _slot: OwnedSemaphorePermit,
    watch: Watch,
) {
    let started = Instant::now();
    let head = tokio::select! {
        () = watch.token.cancelled() => return,
        head = read_head(&mut client, &shared.limits) => head,
    };
    let (buf, end) = match head {
        Ok(head) => head,
        Err(None) => return,
        Err(Some(refusal)) => return refused(&shared, client, ("", &peer), refusal, None).await,
    };
    // Every decision of this connection is made under one generation of the rules.
    let rules = shared.live.rules();
    if let Some(target) = route_target(&rules, &buf[..end]) {
        let request = (buf, end);
        return crate::forward::serve(shared, rules, client, request, target, peer, watch).await;
    }
    let generation = Some(rules.generation);
    let deadline = tokio::time::Instant::now() + shared.limits.connect_timeout;
    let decided = tokio::select! {
        () = watch.token.cancelled() => {
            return stopped(&shared, client, &buf[..end], &peer, rules.generation).await;
        }
        decided = tokio::time::timeout_at(deadline, decide(&shared, &rules, &buf[..end])) => decided,
    };
    let allowed = match decided {
        Ok(Ok(allowed)) => allowed,
        Ok(Err(Refused { target, refusal })) => {
            let target = target.unwrap_or_else(|| raw_target(&buf));
            return refused(&shared, client, (&target, &peer), refusal, generation).await;
        }
        Err(_) => {
            let refusal = Refusal::new(
                RefusalKind::DnsFailure,
                format!(
                    "no DNS answer within the connect timeout of {:?}",
                    shared.limits.connect_timeout
                ),
            );
            let target = raw_target(&buf);
            return refused(&shared, client, (&target, &peer), refusal, generation).await;
        }
    };
    let addresses: Vec<String> = allowed.pinned.addrs.iter().map(|a| a.to_string()).collect();
    let allow = Event::egress_connect(Decision::Allow, allowed.reason, &allowed.target, &peer)
        .data("rule", allowed.rule.as_str())
        .data("addresses", addresses)
        .data("generation", rules.generation);
    if !shared.record(allow).await {
        // Never dial, let alone open a tunnel, for a decision the audit log does not show.
        let refusal = Refusal::new(
            RefusalKind::AuditFailed,
            "the decision could not be recorded in the audit log",
        );
        return refuse(client, &refusal).await;
    }
    let target = allowed.target.clone();
    let _open = shared
        .live
        .register(reach(&allowed), rules.generation, &watch);
    let close = open(&shared, client, &buf[end..], allowed, deadline, &watch).await;
    closed(&shared, (&target, &peer), close, started, &watch).await;
}

/// What an allowed CONNECT reaches, to check again at each reload.
fn reach(allowed: &Allowed) -> Reach {
    if allowed.reason == "observed" {
        return Reach::Observed;
    }
    Reach::Tunnel {
        host: allowed.host.clone(),
        port: allowed.port,
        addresses: allowed.pinned.addrs.clone(),
    }
}

/// Records how an allowed tunnel ended.
async fn closed(
    shared: &Shared,
    (target, peer): (&str, &str),
    close: Close,
    started: Instant,
    watch: &Watch,
) {
    let reason = watch.reason(close.reason);
    let mut event = Event::egress_close(reason, target, peer)
        .data("bytes_up", close.up)
        .data("bytes_down", close.down)
        .data("duration_ms", started.elapsed().as_millis() as u64);
    if let Some(status) = close.status {
        event = event.data("status", status);
    }
    if let Some(dialed) = close.dialed {
        event = event.data("dialed", dialed.to_string());
    }
    if let Some(at) = close.connected {
        let micros = at.saturating_duration_since(started).as_micros();
        event = event.data("connect_micros", u64::try_from(micros).unwrap_or(u64::MAX));
    }
    if let Some(message) = close.message {
        event = event.data("message", message);
    }
    if let Some(sni) = close.sni {
        event = event.data("sni", sni);
    }
    shared.record(event).await;
    // After the event: a reader of this line finds it in the log.
    tracing::info!(client = %crate::escape(peer), target = %target, reason, "egress tunnel closed");
}

/// After the recorded decision: dial, answer, check the ClientHello, pump.
async fn open(
    shared: &Shared,
    mut client: impl Client,
    early: &[u8],
    allowed: Allowed,
    deadline: tokio::time::Instant,
    watch: &Watch,
) -> Close {
    let cancel = &watch.token;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let dialed = tokio::select! {
        () = cancel.cancelled() => return Close::new("shutdown"),
        dialed = dial(&allowed.pinned, allowed.port, left) => dialed,
    };
    let (upstream, dialed) = match dialed {
        Ok(pair) => pair,
        Err(e) => {
            let refusal = dial_refusal(&allowed, &e);
            refuse(client, &refusal).await;
            return Close {
                status: Some(refusal.kind.status()),
                message: Some(error_chain(&e)),
                ..Close::new(refusal.kind.code())
            };
        }
    };
    let mut close = Close {
        dialed: Some(dialed),
        connected: Some(Instant::now()),
        ..Close::new("client_gone")
    };
    if client.write_all(ESTABLISHED).await.is_err() {
        return close;
    }
    close.status = Some(200);
    let mut sent = early.to_vec();
    if shared.limits.sni_check && shared.tls_ports.contains(&allowed.port) {
        let name = allowed.pinned.name.as_str();
        if let Err(refused) = check_hello(&mut client, &mut sent, name, shared, cancel).await {
            return Close {
                up: 0,
                ..refused.with(close)
            };
        }
    }
    let mut upstream = upstream;
    if !sent.is_empty() && upstream.write_all(&sent).await.is_err() {
        close.reason = "connection_error";
        return close;
    }
    let timeouts = Timeouts {
        idle: shared.limits.idle_timeout,
        half_close: shared.limits.half_close_timeout,
    };
    let stats = tunnel::run(&client, &upstream, timeouts, cancel).await;
    close.reason = stats.end.reason();
    close.up = stats.up + sent.len() as u64;
    close.down = stats.down;
    close
}

fn dial_refusal(allowed: &Allowed, error: &DialError) -> Refusal {
    let name = allowed.pinned.name.as_str();
    let refusal = match error {
        _ if out_of_descriptors(error) => out_of_fds("dialing the upstream"),
        DialError::Timeout { limit } => Refusal::new(
            RefusalKind::DialTimeout,
            format!("no checked address of {name} accepted a connection within {limit:?}"),
        ),
        _ => Refusal::new(
            RefusalKind::ConnectFailed,
            format!("could not connect to {name} on port {}", allowed.port),
        ),
    };
    refusal.with_detail(error_chain(error))
}

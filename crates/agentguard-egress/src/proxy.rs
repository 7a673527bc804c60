//! The proxy: accept loop, one task per connection, and graceful shutdown.
//!
//! Per connection, in this order: read the request head (with a deadline and a size limit),
//! parse it and the target once, check the port, then the allowlist, then resolve once
//! through netpin and check every answer, refuse the proxy's own address, dial the checked
//! addresses, record the decision, and only then answer `200 Connection Established` and
//! forward what the client sent after its head. Every refusal is recorded, answered with its
//! status and reason code, and the connection closed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentguard_audit::{AuditSink, Decision, Event};
use agentguard_netpin::{DEFAULT_MAX_ANSWERS, DnsResolver, FetchError, Resolve, dial, pin};
use agentguard_policy::{IpNet, TargetPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};
use crate::head::{head_end, parse_authority, parse_head};
use crate::response::{ESTABLISHED, Refusal, refuse};
use crate::tunnel;

/// Limits with their defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    head_timeout: Duration,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
    max_head_bytes: usize,
    max_answers: usize,
}

/// Builder for [`EgressProxy`].
pub struct EgressProxyBuilder {
    hosts: Vec<String>,
    ports: Vec<u16>,
    allow_cidrs: Vec<IpNet>,
    deny_cidrs: Vec<IpNet>,
    bind: SocketAddr,
    resolver: Option<Arc<dyn Resolve>>,
    limits: Limits,
    audit: Option<Arc<dyn AuditSink>>,
}

impl EgressProxyBuilder {
    /// Allows a host pattern (`pkgs.example.com`, `*.example.com`, `*`). At least one is needed.
    pub fn allow(mut self, pattern: impl Into<String>) -> Self {
        self.hosts.push(pattern.into());
        self
    }

    /// Allows a destination port (default: 443 only).
    pub fn allow_port(mut self, port: u16) -> Self {
        self.ports.push(port);
        self
    }

    /// Marks a non-public range reachable (an internal mirror).
    pub fn allow_cidr(mut self, net: IpNet) -> Self {
        self.allow_cidrs.push(net);
        self
    }

    /// Refuses a range even if public.
    pub fn deny_cidr(mut self, net: IpNet) -> Self {
        self.deny_cidrs.push(net);
        self
    }

    /// The address to listen on (default 127.0.0.1:3128; port 0 picks a free one).
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// The resolver (default: the system configuration).
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// How long a client may take to send its request head (default 10 s).
    pub fn head_timeout(mut self, timeout: Duration) -> Self {
        self.limits.head_timeout = timeout;
        self
    }

    /// How long one upstream dial may take (default 10 s); expiry answers 504.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.limits.connect_timeout = timeout;
        self
    }

    /// How long a tunnel may carry no byte in either direction (default 300 s).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle_timeout = timeout;
        self
    }

    /// The most connections handled at once (default 1024); a slot is held until the tunnel
    /// closes, and a connection over the cap is answered 503.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.limits.max_connections = max;
        self
    }

    /// The largest request head accepted (default 8 KiB); a larger one is answered 431.
    pub fn max_head_bytes(mut self, max: usize) -> Self {
        self.limits.max_head_bytes = max;
        self
    }

    /// Where every decision and every tunnel close is recorded.
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    fn policy(&self) -> Result<TargetPolicy> {
        Ok(TargetPolicy::from_parts(
            &self.hosts,
            &self.ports,
            &self.allow_cidrs,
            &self.deny_cidrs,
        )?)
    }

    /// Validates the configuration, binds, and starts accepting connections.
    pub async fn start(self) -> Result<EgressProxy> {
        let policy = self.policy()?;
        let limits = self.limits;
        for (field, zero) in [
            ("max_connections", limits.max_connections == 0),
            ("max_head_bytes", limits.max_head_bytes < 64),
            ("head_timeout", limits.head_timeout.is_zero()),
            ("connect_timeout", limits.connect_timeout.is_zero()),
            ("idle_timeout", limits.idle_timeout.is_zero()),
        ] {
            if zero {
                return Err(Error::Limit {
                    field,
                    reason: "must be positive (and max_head_bytes at least 64)".into(),
                });
            }
        }
        let resolver = match self.resolver {
            Some(r) => r,
            None => Arc::new(DnsResolver::system()?),
        };
        let listener = TcpListener::bind(self.bind)
            .await
            .map_err(|source| Error::Bind {
                addr: self.bind,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: self.bind,
            source,
        })?;
        let shared = Arc::new(Shared {
            policy,
            resolver,
            limits,
            audit: self.audit,
            local_addr,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
        });
        let accepting = CancellationToken::new();
        let tunnels = CancellationToken::new();
        let tracker = TaskTracker::new();
        let accept = tokio::spawn(accept_loop(
            listener,
            Arc::clone(&shared),
            accepting.clone(),
            tunnels.clone(),
            tracker.clone(),
        ));
        tracing::info!(%local_addr, "egress proxy listening");
        Ok(EgressProxy {
            local_addr,
            accepting,
            tunnels,
            tracker,
            accept: Some(accept),
        })
    }
}

/// A running proxy. Dropping it stops everything at once; [`EgressProxy::shutdown`] is graceful.
pub struct EgressProxy {
    local_addr: SocketAddr,
    accepting: CancellationToken,
    tunnels: CancellationToken,
    tracker: TaskTracker,
    accept: Option<JoinHandle<()>>,
}

/// What a graceful shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shutdown {
    /// True when every connection finished within the grace period.
    pub drained: bool,
}

impl EgressProxy {
    /// A builder with the defaults: 127.0.0.1:3128, port 443 only, the registry address rule,
    /// the system resolver, 10 s head and connect timeouts, 300 s idle timeout, 1024
    /// connections, 8 KiB heads.
    pub fn builder() -> EgressProxyBuilder {
        EgressProxyBuilder {
            hosts: Vec::new(),
            ports: Vec::new(),
            allow_cidrs: Vec::new(),
            deny_cidrs: Vec::new(),
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 3128),
            resolver: None,
            limits: Limits {
                head_timeout: Duration::from_secs(10),
                connect_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(300),
                max_connections: 1024,
                max_head_bytes: 8 * 1024,
                max_answers: DEFAULT_MAX_ANSWERS,
            },
            audit: None,
        }
    }

    /// The address the proxy listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting at once, lets open connections finish for up to `grace`, then closes
    /// the rest. Every tunnel's close event is recorded before this returns.
    pub async fn shutdown(mut self, grace: Duration) -> Shutdown {
        self.accepting.cancel();
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        self.tracker.close();
        let drained = tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok();
        if !drained {
            self.tunnels.cancel();
            self.tracker.wait().await;
        }
        tracing::info!(drained, "egress proxy stopped");
        Shutdown { drained }
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.accepting.cancel();
        self.tunnels.cancel();
    }
}

struct Shared {
    policy: TargetPolicy,
    resolver: Arc<dyn Resolve>,
    limits: Limits,
    audit: Option<Arc<dyn AuditSink>>,
    local_addr: SocketAddr,
    slots: Arc<Semaphore>,
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    accepting: CancellationToken,
    tunnels: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = accepting.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        match Arc::clone(&shared.slots).try_acquire_owned() {
            Ok(slot) => {
                tracker.spawn(handle(shared, stream, peer, slot, tunnels.clone()));
            }
            Err(_) => {
                tracker.spawn(async move {
                    let refusal = Refusal::new(
                        503,
                        "too_many_connections",
                        format!(
                            "the proxy already handles {} connections",
                            shared.limits.max_connections
                        ),
                    );
                    record(
                        &shared,
                        Event::egress_connect(
                            Decision::Deny,
                            refusal.reason,
                            "",
                            &peer.to_string(),
                        )
                        .data("status", 503u16),
                    )
                    .await;
                    refuse(stream, &refusal).await;
                });
            }
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

/// Reads the request head: `Ok((buffer, head length))`, or the refusal to send (`None`
/// when the client went away).
async fn read_head(
    stream: &mut TcpStream,
    limits: &Limits,
) -> std::result::Result<(Vec<u8>, usize), Option<Refusal>> {
    let deadline = tokio::time::Instant::now() + limits.head_timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut searched = 0;
    loop {
        let complete = head_end(&buf, searched);
        if complete.unwrap_or(buf.len()) > limits.max_head_bytes {
            return Err(Some(Refusal::new(
                431,
                "head_too_large",
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
                    408,
                    "head_timeout",
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

async fn handle(
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
            let event = Event::egress_connect(Decision::Deny, refusal.reason, "", &client_text)
                .data("status", refusal.status);
            record(&shared, event).await;
            return refuse(client, &refusal).await;
        }
    };
    let decided = decide(&shared, &buf[..end]).await;
    let (target, upstream, dialed) = match decided {
        Ok(ok) => ok,
        Err((target, refusal)) => {
            let target = target.unwrap_or_else(|| raw_target(&buf));
            tracing::info!(client = %peer, %target, reason = refusal.reason, status = refusal.status, "egress refused");
            let decision = if refusal.is_policy() {
                Decision::Deny
            } else {
                Decision::Error
            };
            let event = Event::egress_connect(decision, refusal.reason, &target, &client_text)
                .data("status", refusal.status)
                .data("message", refusal.message.as_str());
            record(&shared, event).await;
            return refuse(client, &refusal).await;
        }
    };
    let allowed = Event::egress_connect(Decision::Allow, "ok", &target, &client_text)
        .data("status", 200u16)
        .data("dialed", dialed.to_string());
    if !record(&shared, allowed).await {
        // Never open a tunnel that the audit log does not show.
        return refuse(
            client,
            &Refusal::new(
                503,
                "audit_failed",
                "the decision could not be recorded in the audit log",
            ),
        )
        .await;
    }
    tracing::info!(client = %peer, %target, %dialed, "egress tunnel open");
    let mut upstream = upstream;
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

type Decided = std::result::Result<(String, TcpStream, SocketAddr), (Option<String>, Refusal)>;

/// Everything between the head and the 200: parse, port, allowlist, resolve, check, dial.
async fn decide(shared: &Shared, head: &[u8]) -> Decided {
    let request =
        parse_head(head).map_err(|m| (None, Refusal::new(400, "malformed_request", m)))?;
    if request.method != "CONNECT" {
        return Err((
            None,
            Refusal::new(
                405,
                "method_not_allowed",
                format!(
                    "method {} is not allowed; this proxy only tunnels CONNECT host:port",
                    request.method
                ),
            ),
        ));
    }
    let (host, port) = parse_authority(request.target)
        .map_err(|m| (None, Refusal::new(400, "malformed_target", m)))?;
    let target = format!("{host}:{port}");
    let refuse_with = |status: u16, reason: &'static str, message: String| {
        (Some(target.clone()), Refusal::new(status, reason, message))
    };
    let permit = shared
        .policy
        .check_target(&host, port)
        .map_err(|d| refuse_with(403, d.reason.code(), d.message))?;
    let pinned = pin(
        shared.resolver.as_ref(),
        &shared.policy.addresses,
        &permit.name,
        shared.limits.max_answers,
    )
    .await
    .map_err(|e| match e {
        FetchError::Denied(d) => refuse_with(403, d.reason.code(), d.message),
        e @ FetchError::TooManyAnswers { .. } => {
            refuse_with(403, "too_many_answers", e.to_string())
        }
        e => refuse_with(502, "dns_failure", e.to_string()),
    })?;
    let own = shared.local_addr;
    if let Some(ip) = pinned
        .addrs
        .iter()
        .find(|ip| port == own.port() && (**ip == own.ip() || own.ip().is_unspecified()))
    {
        return Err(refuse_with(
            403,
            "non_public_address",
            format!("{ip}:{port} is this proxy's own listening address"),
        ));
    }
    let (upstream, dialed) = dial(&pinned, port, shared.limits.connect_timeout)
        .await
        .map_err(|e| match e {
            FetchError::Timeout { .. } => refuse_with(504, "dial_timeout", e.to_string()),
            e => refuse_with(502, "connect_failed", e.to_string()),
        })?;
    Ok((target, upstream, dialed))
}

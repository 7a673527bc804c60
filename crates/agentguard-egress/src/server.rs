//! The running proxy: the listening socket, the accept loop, and graceful shutdown.
//!
//! One task per connection, each holding a slot of the connection cap until its tunnel
//! closes. Shutdown uses two tokens: `accepting` stops the accept loop at once, `tunnels`
//! closes what is still open after the grace period; a `TaskTracker` knows when every
//! connection (and so every close event) is done.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::AuditSink;
use agentguard_netpin::Resolve;
use agentguard_policy::TargetPolicy;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::builder::Limits;
use crate::connection::{self, Shared};
use crate::error::{Error, Result};
use crate::limits::{Spare, out_of_descriptors, pending};
use crate::response::RefusalKind;

/// What the builder hands over once everything is validated.
pub(crate) struct Config {
    pub(crate) policy: TargetPolicy,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) limits: Limits,
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    pub(crate) bind: SocketAddr,
    pub(crate) tls_ports: Vec<u16>,
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

/// Binds and starts the accept loop.
pub(crate) async fn start(config: Config) -> Result<EgressProxy> {
    let bind = config.bind;
    let listener = TcpListener::bind(bind)
        .await
        .map_err(|source| Error::Bind { addr: bind, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| Error::Bind { addr: bind, source })?;
    let shared = Arc::new(Shared {
        policy: config.policy,
        resolver: config.resolver,
        limits: config.limits,
        audit: config.audit,
        local_addr: Some(local_addr),
        tls_ports: config.tls_ports,
        slots: Arc::new(Semaphore::new(config.limits.connections())),
    });
    let accepting = CancellationToken::new();
    let tunnels = CancellationToken::new();
    let tracker = TaskTracker::new();
    let accept = tokio::spawn(accept_loop(
        listener,
        shared,
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

impl EgressProxy {
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

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    accepting: CancellationToken,
    tunnels: CancellationToken,
    tracker: TaskTracker,
) {
    let spare = Spare::default();
    loop {
        spare.refill();
        let accepted = tokio::select! {
            () = accepting.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) if out_of_descriptors(&e) => {
                // An accept fails for want of a descriptor even when nobody waits; only a
                // waiting client is worth the spare.
                if pending(&listener) && spare.release() {
                    let now = tokio::time::timeout(Duration::from_millis(10), listener.accept());
                    if let Ok(Ok((stream, peer))) = now.await {
                        tracing::warn!(client = %peer, "out of file descriptors: answered 503");
                        let kind = RefusalKind::OutOfDescriptors;
                        let (shared, spare) = (Arc::clone(&shared), spare.clone());
                        tracker.spawn(async move {
                            connection::over_capacity(shared, stream, peer.to_string(), kind).await;
                            spare.refill();
                        });
                        continue;
                    }
                }
                // Nobody waits, or no spare: wait for a descriptor to come free.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        match Arc::clone(&shared.slots).try_acquire_owned() {
            Ok(slot) => {
                tracker.spawn(connection::handle(
                    shared,
                    stream,
                    peer.to_string(),
                    slot,
                    tunnels.clone(),
                ));
            }
            Err(_) => {
                let kind = RefusalKind::TooManyConnections;
                tracker.spawn(connection::over_capacity(
                    shared,
                    stream,
                    peer.to_string(),
                    kind,
                ));
            }
        }
    }
}

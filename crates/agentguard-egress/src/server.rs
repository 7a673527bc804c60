//! The running proxy: the listening socket, the accept loop, and graceful shutdown.
//!
//! One task per connection, each holding a slot of the connection cap until its tunnel
//! closes. Shutdown uses two tokens: `accepting` stops the accept loop at once, `tunnels`
//! closes what is still open after the grace period; a `TaskTracker` knows when every
//! connection (and so every close event) is done.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::AuditSink;
use agentguard_netpin::Resolve;
use agentguard_policy::TargetPolicy;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connection;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::limits::{Spare, out_of_descriptors, pending};
use crate::response::RefusalKind;
use crate::route::Route;
use crate::shared::{Client, Shared};

/// Where the proxy listens.
#[derive(Debug, Clone)]
pub(crate) enum Bind {
    Tcp(SocketAddr),
    /// A UNIX socket at this path (created mode 0666, so a container's user can connect to
    /// it where it is bind-mounted); `client` names its clients in the audit log.
    Unix {
        path: PathBuf,
        client: String,
    },
}

/// What the builder hands over once everything is validated.
pub(crate) struct Config {
    pub(crate) policy: Option<TargetPolicy>,
    pub(crate) routes: BTreeMap<String, Arc<Route>>,
    /// The configured route port; with a TCP bind to port 0, the port bound.
    pub(crate) route_port: u16,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) limits: Limits,
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    pub(crate) bind: Bind,
    pub(crate) tls_ports: Vec<u16>,
    /// The connections it may hold: its own cap, or the process's budget.
    pub(crate) slots: Arc<Semaphore>,
}

/// A running proxy. Dropping it stops everything at once; [`EgressProxy::shutdown`] is graceful.
pub struct EgressProxy {
    local_addr: Option<SocketAddr>,
    socket_path: Option<PathBuf>,
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

/// A listening socket the accept loop takes clients from.
trait Accept: AsFd + Send + Sync + 'static {
    type Stream: Client;
    /// The next client and the name it goes by in the audit log.
    fn next(&self) -> impl Future<Output = io::Result<(Self::Stream, String)>> + Send;
}

impl Accept for TcpListener {
    type Stream = TcpStream;
    async fn next(&self) -> io::Result<(TcpStream, String)> {
        let (stream, peer) = self.accept().await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, peer.to_string()))
    }
}

/// A UNIX listener and the name of its clients.
struct Unix(UnixListener, String);

impl AsFd for Unix {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl Accept for Unix {
    type Stream = UnixStream;
    async fn next(&self) -> io::Result<(UnixStream, String)> {
        let (stream, _) = self.0.accept().await?;
        Ok((stream, self.1.clone()))
    }
}

/// Binds and starts the accept loop.
pub(crate) async fn start(config: Config) -> Result<EgressProxy> {
    let shared = |local_addr: Option<SocketAddr>| {
        let route_port = match local_addr {
            Some(addr) if config.route_port == 0 => addr.port(),
            _ => config.route_port,
        };
        Arc::new(Shared {
            policy: config.policy,
            routes: config.routes,
            route_port,
            resolver: config.resolver,
            limits: config.limits,
            audit: config.audit,
            local_addr,
            tls_ports: config.tls_ports,
            slots: config.slots,
        })
    };
    let accepting = CancellationToken::new();
    let tunnels = CancellationToken::new();
    let tracker = TaskTracker::new();
    let tokens = (accepting.clone(), tunnels.clone(), tracker.clone());
    let (local_addr, socket_path, accept) = match config.bind {
        Bind::Tcp(bind) => {
            let listener = TcpListener::bind(bind)
                .await
                .map_err(|source| Error::Bind { addr: bind, source })?;
            let local_addr = listener
                .local_addr()
                .map_err(|source| Error::Bind { addr: bind, source })?;
            tracing::info!(%local_addr, "egress proxy listening");
            let accept = tokio::spawn(accept_loop(listener, shared(Some(local_addr)), tokens));
            (Some(local_addr), None, accept)
        }
        Bind::Unix { path, client } => {
            let bind = |source| Error::BindUnix {
                path: path.clone(),
                source,
            };
            let listener = UnixListener::bind(&path).map_err(bind)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
                .map_err(bind)?;
            tracing::info!(path = %path.display(), "egress proxy listening");
            let accept = tokio::spawn(accept_loop(Unix(listener, client), shared(None), tokens));
            (None, Some(path), accept)
        }
    };
    Ok(EgressProxy {
        local_addr,
        socket_path,
        accepting,
        tunnels,
        tracker,
        accept: Some(accept),
    })
}

impl EgressProxy {
    /// The TCP address the proxy listens on (with the real port when bound to port 0); for
    /// a proxy on a UNIX socket, `0.0.0.0:0` (see [`EgressProxy::socket_path`]).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The UNIX socket the proxy listens on, if it listens on one.
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket_path.as_deref()
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
        if let Some(path) = &self.socket_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

async fn accept_loop(
    listener: impl Accept,
    shared: Arc<Shared>,
    (accepting, tunnels, tracker): (CancellationToken, CancellationToken, TaskTracker),
) {
    let spare = Spare::default();
    loop {
        spare.refill();
        let accepted = tokio::select! {
            () = accepting.cancelled() => return,
            accepted = listener.next() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) if out_of_descriptors(&e) => {
                // An accept fails for want of a descriptor even when nobody waits; only a
                // waiting client is worth the spare.
                if pending(&listener) && spare.release() {
                    let now = tokio::time::timeout(Duration::from_millis(10), listener.next());
                    if let Ok(Ok((stream, peer))) = now.await {
                        tracing::warn!(client = %peer, "out of file descriptors: answered 503");
                        let kind = RefusalKind::OutOfDescriptors;
                        let (shared, spare) = (Arc::clone(&shared), spare.clone());
                        tracker.spawn(async move {
                            connection::over_capacity(shared, stream, peer, kind).await;
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
        let shared = Arc::clone(&shared);
        match Arc::clone(&shared.slots).try_acquire_owned() {
            Ok(slot) => {
                tracker.spawn(connection::handle(
                    shared,
                    stream,
                    peer,
                    slot,
                    tunnels.clone(),
                ));
            }
            Err(_) => {
                let kind = RefusalKind::TooManyConnections;
                tracker.spawn(connection::over_capacity(shared, stream, peer, kind));
            }
        }
    }
}

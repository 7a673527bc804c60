//! The running proxy: the listening socket, the accept loop, and graceful shutdown.
//!
//! One task per connection, each holding a slot of the connection cap until its tunnel
//! closes. Shutdown uses two tokens: `accepting` stops the accept loop at once, `tunnels`
//! closes what is still open after the grace period; a `TaskTracker` knows when every
//! connection (and so every close event) is done.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{AuditSink, Event};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connection;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::limits::{Spare, out_of_descriptors, pending};
use crate::live::{Live, Rules, Watch};
use crate::response::RefusalKind;
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
    /// The first generation's rules.
    pub(crate) rules: Rules,
    /// The event announcing them (`policy_loaded`), recorded before the proxy listens.
    pub(crate) loaded: Option<Event>,
    /// The configured route port; with a TCP bind to port 0, the port bound.
    pub(crate) route_port: u16,
    pub(crate) limits: Limits,
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    pub(crate) bind: Bind,
    pub(crate) tls_ports: Vec<u16>,
    /// The connections it may hold: its own cap, or the process's budget.
    pub(crate) slots: Arc<Semaphore>,
}

/// A running proxy. Dropping it stops everything at once; [`EgressProxy::shutdown`] is graceful.
pub struct EgressProxy {
    shared: Arc<Shared>,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
    local_addr: Option<SocketAddr>,
    socket_path: Option<PathBuf>,
    accepting: CancellationToken,
    tunnels: CancellationToken,
    tracker: TaskTracker,
    accept: Option<JoinHandle<()>>,
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloaded {
    /// The generation now in place.
    pub generation: u64,
    /// How many open connections it closed.
    pub revoked: usize,
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
    let accepting = CancellationToken::new();
    let tunnels = CancellationToken::new();
    let tracker = TaskTracker::new();
    let tokens = (accepting.clone(), tunnels.clone(), tracker.clone());
    let (listener, local_addr, socket_path) = listen(&config.bind).await?;
    let route_port = match local_addr {
        Some(addr) if config.route_port == 0 => addr.port(),
        _ => config.route_port,
    };
    let shared = Arc::new(Shared {
        live: Live::new(config.rules),
        route_port,
        limits: config.limits,
        audit: config.audit,
        local_addr,
        tls_ports: config.tls_ports,
        slots: config.slots,
    });
    if let Some(loaded) = config.loaded
        && !shared.record(loaded.data("generation", 1u64)).await
    {
        return Err(Error::AuditFailed);
    }
    let accept = match listener {
        Listener::Tcp(listener) => tokio::spawn(accept_loop(listener, Arc::clone(&shared), tokens)),
        Listener::Unix(listener) => {
            tokio::spawn(accept_loop(listener, Arc::clone(&shared), tokens))
        }
    };
    Ok(EgressProxy {
        shared,
        reloading: tokio::sync::Mutex::new(()),
        local_addr,
        socket_path,
        accepting,
        tunnels,
        tracker,
        accept: Some(accept),
    })
}

enum Listener {
    Tcp(TcpListener),
    Unix(Unix),
}

/// Opens the listening socket: the listener, its TCP address, its UNIX path.
async fn listen(bind: &Bind) -> Result<(Listener, Option<SocketAddr>, Option<PathBuf>)> {
    match bind {
        Bind::Tcp(bind) => {
            let bind = *bind;
            let listener = TcpListener::bind(bind)
                .await
                .map_err(|source| Error::Bind { addr: bind, source })?;
            let local_addr = listener
                .local_addr()
                .map_err(|source| Error::Bind { addr: bind, source })?;
            tracing::info!(%local_addr, "egress proxy listening");
            Ok((Listener::Tcp(listener), Some(local_addr), None))
        }
        Bind::Unix { path, client } => {
            let bind = |source| Error::BindUnix {
                path: path.clone(),
                source,
            };
            let listener = UnixListener::bind(path).map_err(bind)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(bind)?;
            tracing::info!(path = %path.display(), "egress proxy listening");
            let listener = Unix(listener, client.clone());
            Ok((Listener::Unix(listener), None, Some(path.clone())))
        }
    }
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

    /// The generation of the rules in place: 1 at start, one more at each reload.
    pub fn generation(&self) -> u64 {
        self.shared.live.rules().generation
    }

    /// Records `event` in the proxy's audit sink (a policy that failed to load, say); false
    /// when it could not be recorded.
    pub async fn record(&self, event: Event) -> bool {
        self.shared.record(event).await
    }

    /// Puts `rules` in place as the next generation: `loaded` (a `policy_loaded` event) is
    /// recorded first, with the new `generation`, then the rules replace the old ones at once
    /// and every open tunnel and route request they refuse is closed (`policy_revoked`). Rules
    /// that are not valid, or an event the audit sink refuses, leave the old ones in place.
    pub async fn reload(&self, rules: crate::ProxyRules, loaded: Event) -> Result<Reloaded> {
        let _one = self.reloading.lock().await;
        let current = self.shared.live.rules();
        let rules = rules.into_rules(Some(&current.resolver))?;
        let generation = current.generation + 1;
        if !self
            .shared
            .record(loaded.data("generation", generation))
            .await
        {
            return Err(Error::AuditFailed);
        }
        let (generation, revoked) = self.shared.live.replace(rules);
        tracing::info!(generation, revoked, "egress policy reloaded");
        Ok(Reloaded {
            generation,
            revoked,
        })
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
                let watch = Watch::under(&tunnels);
                tracker.spawn(connection::handle(shared, stream, peer, slot, watch));
            }
            Err(_) => {
                let kind = RefusalKind::TooManyConnections;
                tracker.spawn(connection::over_capacity(shared, stream, peer, kind));
            }
        }
    }
}

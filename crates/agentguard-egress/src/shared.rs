//! What the stages of a connection share: the proxy's settings (`Shared`), the client socket
//! (`Client`, TCP or UNIX), and how an allowed connection ended (`Close`). Below `decide`,
//! `hello`, `connection` and `forward`, so none of them imports another for these.

use std::net::SocketAddr;
use std::sync::Arc;

use agentguard_audit::{Attempt, AuditSink, Event};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;

use crate::limits::Limits;
use crate::live::Live;
use crate::socket::Socket;

/// What every connection of one proxy shares.
pub(crate) struct Shared {
    /// The rules of the current generation and the connections they let open.
    pub(crate) live: Arc<Live>,
    /// The port clients reach the routes on (the relay's inside a container).
    pub(crate) route_port: u16,
    pub(crate) limits: Limits,
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    /// The TCP address the proxy listens on (none for a UNIX socket).
    pub(crate) local_addr: Option<SocketAddr>,
    /// The ports whose tunnels get the TLS name check.
    pub(crate) tls_ports: Vec<u16>,
    pub(crate) slots: Arc<Semaphore>,
}

impl Shared {
    /// Records an event at once when the sink can do so without waiting (a log in flush
    /// mode whose lock is free: one `write`), otherwise off the async threads; the caller
    /// waits only as long as the sink's durability requires. Returns false when the event
    /// could not be recorded.
    pub(crate) async fn record(&self, event: Event) -> bool {
        let Some(sink) = self.audit.clone() else {
            return true;
        };
        let event = match sink.try_record_now(event) {
            Attempt::Done(result) => return recorded(result),
            Attempt::WouldWait(event) => event,
        };
        match tokio::task::spawn_blocking(move || sink.record(event)).await {
            Ok(result) => recorded(result),
            Err(e) => {
                tracing::error!(error = %e, "audit task failed");
                false
            }
        }
    }
}

/// Whether the event was recorded; logs why not.
fn recorded(result: agentguard_audit::Result<agentguard_audit::Receipt>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(error = %e, "audit event could not be recorded");
            false
        }
    }
}

/// A client connection: TCP or UNIX.
pub(crate) trait Client: AsyncRead + AsyncWrite + Socket + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Socket + Unpin + Send + 'static> Client for T {}

/// How a connection with a recorded allow decision ended: its close event.
#[derive(Debug, Default)]
pub(crate) struct Close {
    pub(crate) reason: &'static str,
    /// The status answered (200 once the tunnel opened), when one was.
    pub(crate) status: Option<u16>,
    pub(crate) dialed: Option<SocketAddr>,
    /// When the upstream connection was made.
    pub(crate) connected: Option<std::time::Instant>,
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) message: Option<String>,
    pub(crate) sni: Option<String>,
}

impl Close {
    pub(crate) fn new(reason: &'static str) -> Close {
        Close {
            reason,
            ..Close::default()
        }
    }
}

//! `Proxy`: the egress proxy on its own thread (`BlockingEgressProxy`), its decisions queued
//! for the Python callback.
//!
//! The proxy records through `QueueSink`: the event goes to the audit log first when one is
//! given (so the chained log never depends on the callback), then into a bounded queue with
//! `try_send`, which never blocks a tunnel; a full queue drops the event from the queue only
//! and counts it. The Python layer drains the queue on its own thread and calls `on_decision`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentguard_audit::{AuditLog, AuditSink, Durability, Event, Receipt};
use agentguard_egress::{BlockingEgressProxy, EgressProxy};
use pyo3::prelude::*;

use crate::errors;
use crate::fetcher::{NetSettings, audit_log};

/// Records to the log (if any), then offers the event to the callback's queue.
struct QueueSink {
    log: Option<Arc<AuditLog>>,
    queue: SyncSender<String>,
    dropped: Arc<AtomicU64>,
    seq: AtomicU64,
}

impl AuditSink for QueueSink {
    fn record(&self, event: Event) -> agentguard_audit::Result<Receipt> {
        let fields = serde_json::json!({
            "kind": event.kind,
            "decision": event.decision,
            "reason": event.reason,
            "subject": event.subject,
            "data": event.data,
        });
        let receipt = match &self.log {
            Some(log) => log.record(event)?,
            None => Receipt {
                seq: self.seq.fetch_add(1, Ordering::Relaxed),
                hash: String::new(),
            },
        };
        match self.queue.try_send(fields.to_string()) {
            Ok(()) => {}
            // Full, or the Python side is gone: the tunnel goes on; the loss is counted.
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(receipt)
    }
}

/// A running proxy and the receiving end of its decisions.
#[pyclass(frozen, module = "agentguard._native")]
pub(crate) struct Proxy {
    running: crate::Owned<Mutex<Option<BlockingEgressProxy>>>,
    address: SocketAddr,
    decisions: Mutex<Receiver<String>>,
    dropped: Arc<AtomicU64>,
    log: crate::Owned<Option<Arc<AuditLog>>>,
}

#[pymethods]
impl Proxy {
    /// Starts the proxy on `host:port` (0: any free port); returns once it listens.
    #[new]
    #[pyo3(signature = (allow, allow_ports, allow_cidrs, nameservers, host, port, audit, audit_key_env, queue))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        allow: Vec<String>,
        allow_ports: Vec<u16>,
        allow_cidrs: Vec<String>,
        nameservers: Vec<String>,
        host: &str,
        port: u16,
        audit: Option<PathBuf>,
        audit_key_env: Option<String>,
        queue: usize,
    ) -> PyResult<Self> {
        let what = "EgressProxy";
        crate::this_process(py)?;
        let net = NetSettings::new(py, what, &allow, &allow_ports, &allow_cidrs, &nameservers)?;
        // The operator's floor binds this proxy as it binds every config.
        let floor = std::env::var_os(agentguard_config::FLOOR_ENV).filter(|p| !p.is_empty());
        if let Some(floor) = floor {
            let grant = agentguard_config::proxy_grant(Some(&net.policy), &[]);
            let path = std::path::Path::new(&floor);
            agentguard_config::check_floor(&grant, agentguard_config::FLOOR_ENV, path, what)
                .map_err(|e| errors::raise(py, "ConfigError", e.to_string(), "invalid_config"))?;
        }
        let ip: IpAddr = host.parse().map_err(|_| {
            errors::raise(
                py,
                "ConfigError",
                format!("{what}: host {host:?} is not an IP address; give the address to listen on, such as 127.0.0.1"),
                "invalid_config",
            )
        })?;
        if queue == 0 {
            return Err(errors::raise(
                py,
                "ConfigError",
                format!("{what}: queue = 0 holds no decision; give at least 1"),
                "invalid_config",
            ));
        }
        // The proxy's decisions are frequent and on the hot path: flush durability, as the CLI's.
        let log = audit_log(py, audit, audit_key_env.as_deref(), Durability::Flush)?;
        let (sender, receiver) = sync_channel(queue);
        let dropped = Arc::new(AtomicU64::new(0));
        let sink = QueueSink {
            log: log.clone(),
            queue: sender,
            dropped: Arc::clone(&dropped),
            seq: AtomicU64::new(0),
        };
        let mut builder = EgressProxy::builder()
            .policy(net.policy)
            .bind(SocketAddr::new(ip, port))
            .audit(Arc::new(sink));
        if let Some(resolver) = net.resolver {
            builder = builder.resolver(resolver);
        }
        let running = py
            .detach(|| BlockingEgressProxy::start(builder))
            .map_err(|e| {
                errors::raise(
                    py,
                    "EngineError",
                    format!("{what}: {}", errors::chain(&e)),
                    "proxy_failed",
                )
            })?;
        Ok(Proxy {
            address: running.local_addr(),
            running: crate::Owned::new(Mutex::new(Some(running))),
            decisions: Mutex::new(receiver),
            dropped,
            log: crate::Owned::new(log),
        })
    }

    /// `(host, port)` the proxy listens on.
    fn address(&self) -> (String, u16) {
        (self.address.ip().to_string(), self.address.port())
    }

    /// The next decision's fields as JSON, waiting up to `timeout` seconds with the thread
    /// detached; `None` when none came (or the proxy stopped and the queue is empty).
    fn next_decision(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<String>> {
        crate::this_process(py)?;
        let wait = Duration::from_secs_f64(timeout.clamp(0.0, 60.0));
        Ok(py.detach(|| {
            let decisions = self
                .decisions
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // A timeout, or the proxy stopped with the queue drained.
            decisions.recv_timeout(wait).ok()
        }))
    }

    /// Decisions the full queue could not take (they are in the audit log, when one is kept).
    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Stops accepting, lets tunnels finish for up to `grace` seconds, closes the rest and
    /// joins the thread; then syncs the audit log. True when every tunnel finished in time.
    fn stop(&self, py: Python<'_>, grace: f64) -> PyResult<bool> {
        crate::this_process(py)?;
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(running) = running else {
            return Ok(true);
        };
        let grace = Duration::from_secs_f64(grace.clamp(0.0, 3600.0));
        let shutdown = py.detach(|| running.stop(grace));
        if let Some(log) = self.log.as_ref() {
            log.sync().map_err(|e| {
                errors::raise(
                    py,
                    "AgentGuardError",
                    format!("EgressProxy: syncing the audit log: {}", errors::chain(&e)),
                    "audit_failed",
                )
            })?;
        }
        Ok(shutdown.drained)
    }
}

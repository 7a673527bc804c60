//! A blocking wrapper for callers without tokio, like the seed's `proxy.start()` / `proxy.stop()`.
//!
//! The proxy runs on its own thread with its own runtime; `start` returns once it accepts
//! connections, and `stop` shuts it down gracefully and joins the thread.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::builder::EgressProxyBuilder;
use crate::error::{Error, Result};
use crate::server::Shutdown;

/// A proxy running on its own thread.
pub struct BlockingEgressProxy {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<Duration>>,
    thread: Option<JoinHandle<Shutdown>>,
}

impl BlockingEgressProxy {
    /// Starts the proxy on a new thread; returns once it listens.
    pub fn start(builder: EgressProxyBuilder) -> Result<BlockingEgressProxy> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<SocketAddr>>();
        let (stop_tx, stop_rx) = oneshot::channel::<Duration>();
        let thread = std::thread::Builder::new()
            .name("agentguard-egress".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(Error::Runtime(e)));
                        return Shutdown { drained: true };
                    }
                };
                runtime.block_on(async move {
                    let proxy = match builder.start().await {
                        Ok(p) => p,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return Shutdown { drained: true };
                        }
                    };
                    let _ = ready_tx.send(Ok(proxy.local_addr()));
                    let grace = stop_rx.await.unwrap_or(Duration::ZERO);
                    proxy.shutdown(grace).await
                })
            })
            .map_err(Error::Runtime)?;
        let local_addr = ready_rx.recv().map_err(|_| Error::ThreadEnded)??;
        Ok(BlockingEgressProxy {
            local_addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address the proxy listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets tunnels finish for up to `grace`, closes the rest, joins the thread.
    pub fn stop(mut self, grace: Duration) -> Shutdown {
        self.stop_now(grace)
    }

    fn stop_now(&mut self, grace: Duration) -> Shutdown {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(grace);
        }
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or(Shutdown { drained: false })
    }
}

impl Drop for BlockingEgressProxy {
    fn drop(&mut self) {
        self.stop_now(Duration::ZERO);
    }
}

//! Waiting for SIGINT or SIGTERM, for every long-running subcommand; SIGHUP for a reload.

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// Which signal ended the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Interrupt,
    Terminate,
}

impl Stop {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
        }
    }
}

/// SIGINT and SIGTERM handlers, installed at once so no signal is missed while work starts.
pub(crate) struct Shutdown {
    interrupt: Signal,
    terminate: Signal,
}

impl Shutdown {
    /// Installs both handlers. Must be called inside the async runtime.
    pub(crate) fn install() -> anyhow::Result<Shutdown> {
        Ok(Shutdown {
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// Waits for the first of SIGINT and SIGTERM.
    pub(crate) async fn recv(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
        }
    }
}

/// The SIGHUP handler: `egress-proxy --policy` reloads its file on it. Inside the runtime.
pub(crate) fn hangup() -> anyhow::Result<Signal> {
    signal(SignalKind::hangup()).context("installing the SIGHUP handler")
}

/// A single-threaded runtime: a run is one engine client and a few pipes.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

//! Building an [`McpServer`]: the sandbox and tools, and the server's own settings.

use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::AuditSink;
use agentguard_netpin::Fetcher;
use agentguard_sandbox::Sandbox;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::runner::Runner;
use crate::server::{DEFAULT_PROGRESS_EVERY, Inner, McpServer};
use crate::tools::ToolSet;

/// Builder for [`McpServer`].
pub struct McpServerBuilder {
    sandbox: Arc<Sandbox>,
    runner: Option<Arc<dyn Runner>>,
    tools: ToolSet,
    fetcher: Option<Fetcher>,
    max_concurrent: usize,
    audit: Option<Arc<dyn AuditSink>>,
    stop: CancellationToken,
    progress_every: Duration,
}

impl McpServer {
    /// A server for `sandbox`'s commands as `tools` describes them.
    pub fn builder(sandbox: Sandbox, tools: ToolSet) -> McpServerBuilder {
        McpServerBuilder {
            sandbox: Arc::new(sandbox),
            runner: None,
            tools,
            fetcher: None,
            max_concurrent: std::thread::available_parallelism().map_or(1, |n| n.get()),
            audit: None,
            stop: CancellationToken::new(),
            progress_every: DEFAULT_PROGRESS_EVERY,
        }
    }
}

impl McpServerBuilder {
    /// The fetcher behind the `fetch` tool (which the tool set must list).
    pub fn fetcher(mut self, fetcher: Fetcher) -> Self {
        self.fetcher = Some(fetcher);
        self
    }

    /// Runs the checked calls with `runner` instead of the sandbox itself (which still checks
    /// each call and names each run).
    pub fn runner(mut self, runner: Arc<dyn Runner>) -> Self {
        self.runner = Some(runner);
        self
    }

    /// At most this many runs at once (default: the core count); the rest wait within their
    /// timeout.
    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = n.max(1);
        self
    }

    /// Records every call in `sink` (the runs record themselves through the sandbox).
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// The token that ends the server (default: a fresh one).
    pub fn stop(mut self, stop: CancellationToken) -> Self {
        self.stop = stop;
        self
    }

    /// How often a call with a progress token reports (default 5 s).
    pub fn progress_every(mut self, every: Duration) -> Self {
        self.progress_every = every;
        self
    }

    /// The server.
    pub fn build(self) -> Result<McpServer, crate::Error> {
        Ok(McpServer {
            inner: Arc::new(Inner {
                check: self.sandbox.executor().spec().check(),
                runner: self
                    .runner
                    .unwrap_or_else(|| Arc::clone(&self.sandbox) as Arc<dyn Runner>),
                sandbox: self.sandbox,
                tools: self.tools,
                fetcher: self.fetcher,
                slots: Semaphore::new(self.max_concurrent),
                audit: self.audit,
                stop: self.stop,
                progress_every: self.progress_every,
                calls: TaskTracker::new(),
            }),
        })
    }
}

//! Where a tool's run happens: the seam between the server and what runs its commands. The
//! server checks the call (tool, arguments, slot) and owns cancellation, progress and the
//! `mcp_call` event; a [`Runner`] starts the checked invocation, stops it by name, and records
//! the run's own events. The local [`Sandbox`] is one; `agentguard mcp` gives a cluster config
//! another, which runs each call as a Job.

use std::future::Future;
use std::pin::Pin;

use agentguard_audit::error_chain;
use agentguard_container::{OutputMeter, RunIdentity};
use agentguard_policy::Invocation;
use agentguard_sandbox::{Error as SandboxError, Finished, Sandbox};

use crate::result::{self, Outcome};

/// A boxed future borrowing its runner.
pub type RunFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs the checked invocations of one server.
pub trait Runner: Send + Sync {
    /// Runs `invocation` under `identity`, its output bytes counted by `meter`, until it ends.
    /// A run that happened is a [`Finished`] whatever its exit; one that did not, or did not
    /// finish, is the [`Outcome`] to answer. Dropping the future stops the run.
    fn run<'a>(
        &'a self,
        invocation: &'a Invocation,
        identity: &'a RunIdentity,
        meter: &'a OutputMeter,
    ) -> RunFuture<'a, Result<Finished, Outcome>>;

    /// Stops and removes the run named `container`, if anything of it is left.
    fn kill<'a>(&'a self, container: &'a str) -> RunFuture<'a, ()>;

    /// Records that the run of command `name` named `container` was stopped for `reason`
    /// (`cancelled`, `shutting_down`) before it concluded; the error says why it could not be.
    fn record_stopped(&self, name: &str, container: &str, reason: &str) -> Result<(), String>;
}

impl Runner for Sandbox {
    fn run<'a>(
        &'a self,
        invocation: &'a Invocation,
        identity: &'a RunIdentity,
        meter: &'a OutputMeter,
    ) -> RunFuture<'a, Result<Finished, Outcome>> {
        Box::pin(async move {
            let options = agentguard_sandbox::RunOptions {
                meter: Some(meter),
                ..Default::default()
            };
            match Sandbox::run(self, invocation, identity, options).await {
                Ok(finished) => Ok(finished),
                Err(SandboxError::Failed(finished)) => Ok(*finished),
                Err(error) => Err(result::run_error(invocation.command(), &error)),
            }
        })
    }

    fn kill<'a>(&'a self, container: &'a str) -> RunFuture<'a, ()> {
        Box::pin(self.kill_by_name(container))
    }

    fn record_stopped(&self, name: &str, container: &str, reason: &str) -> Result<(), String> {
        self.executor()
            .record_stopped(name, container, reason, None)
            .map_err(|error| error_chain(&error))
    }
}

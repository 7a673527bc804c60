//! Why a sandboxed run was refused or produced no result.

use std::path::PathBuf;

use agentguard_container::{RunError, RunResult};

use crate::count::EgressCounts;
use crate::finished::Finished;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a sandboxed run was refused, or produced no result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `network` value other than `none` or `egress`.
    #[error(
        "network {value:?} is not accepted: use \"none\" (no network, the default) or \"egress\" (the egress proxy is the only way out); an engine network such as bridge or host would let the command bypass the proxy"
    )]
    Network {
        /// The value given.
        value: String,
    },
    /// The egress settings do not make a usable allowlist for a command.
    #[error("{message}")]
    Config {
        /// What is wrong and what to do.
        message: String,
    },
    /// The relay program is missing or unusable.
    #[error(
        "{origin} {problem}: a network = \"egress\" run needs the static relay (rebuild agentguard, or point AGENTGUARD_RELAY at a static agentguard-relay); the command was not started"
    )]
    Relay {
        /// Which relay.
        origin: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The folder that holds runs' sockets is not private to this user.
    #[error(
        "the runs folder {path} is not safe for the egress proxy's socket: {why}; remove it or choose another with AGENTGUARD_RUN_DIR (it must be this user's, mode 0700); the command was not started",
        path = path.display()
    )]
    RunsDirUnsafe {
        /// The folder.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The run's folder (or a file in it) could not be created.
    #[error("{action} at {path} failed; the command was not started", path = path.display())]
    RunDir {
        /// The path.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The run's egress proxy could not be started (its socket, its resolver).
    #[error("starting the run's egress proxy failed; the command was not started")]
    Proxy(#[source] agentguard_egress::Error),
    /// The container run failed.
    #[error(transparent)]
    Run(RunError),
    /// `check` is set and the command did not exit 0.
    #[error("command {:?} failed: {} with exit code {:?}", .0.result.command, .0.result.status.as_str(), .0.result.exit_code)]
    Failed(Box<Finished>),
}

impl Error {
    /// A stable snake_case reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Network { .. } => "invalid_network",
            Error::Config { .. } => "invalid_egress",
            Error::Relay { .. } => "relay_unavailable",
            Error::RunsDirUnsafe { .. } | Error::RunDir { .. } => "run_folder_failed",
            Error::Proxy(_) => "proxy_failed",
            Error::Run(e) => e.reason(),
            Error::Failed(_) => "command_failed",
        }
    }

    /// True for a policy decision: a name off the allowlist.
    pub fn is_denial(&self) -> bool {
        matches!(self, Error::Run(RunError::Denied(_)))
    }

    /// True for a configuration mistake (a usage error), not a failure at run time.
    pub fn is_config(&self) -> bool {
        matches!(self, Error::Network { .. } | Error::Config { .. })
    }
}

/// The run's outcome with its counts: a failed command (`check`) keeps them too.
pub(crate) fn finish(
    outcome: Result<RunResult, RunError>,
    egress: Option<EgressCounts>,
    invocation: &agentguard_policy::Invocation,
) -> Result<Finished> {
    let params = invocation.params().to_vec();
    match outcome {
        Ok(result) => Ok(Finished {
            result,
            egress,
            params,
        }),
        Err(RunError::Failed(result)) => Err(Error::Failed(Box::new(Finished {
            result: *result,
            egress,
            params,
        }))),
        Err(e) => Err(Error::Run(e)),
    }
}

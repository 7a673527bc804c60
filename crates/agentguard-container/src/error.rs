//! Error types for agentguard-container: a spec that cannot be built, and a run that produced
//! no result.
//!
//! Causes are kept as `#[source]`; messages never repeat them (print a chain with
//! `agentguard_audit::error_chain`). Every [`RunError`] has a stable `reason()` code.

use std::path::PathBuf;

use agentguard_policy::Denial;

use crate::kind::EngineKind;
use crate::result::RunResult;

/// What to do about it, for every message that names the cause.
pub(crate) const ROOTLESS_FIX: &str = "use a cgroup v2 host that delegates the memory, pids and cpu controllers to this user (systemd: `Delegate=memory pids cpu` for user@.service), or run the engine as root; `accept_weakened = [\"limits\"]` runs without the limits";

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can be wrong when building a container specification.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A field has a value the executor refuses; the message names the field and the value.
    #[error("invalid `{field}` value {value:?}: {reason}")]
    Invalid {
        /// The configuration key (`memory`, `user`, ...).
        field: &'static str,
        /// The value exactly as given.
        value: String,
        /// What is wrong and what to write instead.
        reason: String,
    },
    /// The command allowlist is invalid.
    #[error(transparent)]
    Policy(#[from] agentguard_policy::Error),
    /// A value a command sets for itself is refused: the message names
    /// `commands.NAME.KEY`, the value, and what to write instead.
    #[error("invalid `commands.{command}.{field}` value {value:?}: {reason}")]
    InCommand {
        /// The command.
        command: String,
        /// The key (`timeout`, `writable`, ...).
        field: &'static str,
        /// The value exactly as given.
        value: String,
        /// What is wrong and what to write instead.
        reason: String,
    },
    /// No engine was named and none is installed.
    #[error(
        "no container engine found on PATH: install docker or podman, or set `engine` to its path"
    )]
    NoEngine,
    /// A file this process needed could not be read.
    #[error("{action} ({path}) failed", path = path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The same error, for a value command `command` set: `Invalid` names
    /// `commands.NAME.KEY`; anything else is kept as it is.
    pub fn in_command(self, command: &str) -> Error {
        match self {
            Error::Invalid {
                field,
                value,
                reason,
            } => Error::InCommand {
                command: command.to_owned(),
                field,
                value,
                reason,
            },
            other => other,
        }
    }
}

pub(crate) fn invalid(
    field: &'static str,
    value: impl Into<String>,
    reason: impl Into<String>,
) -> Error {
    Error::Invalid {
        field,
        value: value.into(),
        reason: reason.into(),
    }
}

/// Why a run produced no result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The name is not on the command allowlist.
    #[error("{0}")]
    Denied(Denial),
    /// The image is not present locally (and nothing is ever pulled).
    #[error(
        "image {image:?} is not present in the local {engine} image store and pull is `never`: load or build it first (`{engine} load`, `{engine} import`, `{engine} build`), then pin it by digest or image ID"
    )]
    MissingImage {
        /// The image reference.
        image: String,
        /// The engine.
        engine: EngineKind,
    },
    /// `engine = "oci"`: the image could not be taken from its store into the cache (the
    /// store could not save it, a layer did not match its digest, the unpack failed).
    #[error(
        "image {image:?} could not be unpacked for engine = \"oci\": {reason}; nothing was started (`agentguard doctor --config FILE` checks the image, `agentguard gc` clears the cache)"
    )]
    ImageCache {
        /// The image as the config names it.
        image: String,
        /// What failed.
        reason: String,
    },
    /// The pinned digest or ID does not match the local image.
    #[error("image {image:?} does not match its pin: {reason}")]
    ImagePin {
        /// The image reference.
        image: String,
        /// What did not match.
        reason: String,
    },
    /// The OCI runtime is not available to the engine; agentguard never falls back to another.
    #[error(
        "the {engine} engine does not know the runtime {runtime:?}: register it (for runsc under Docker, add it to /etc/docker/daemon.json with \"runtimeArgs\": [\"--network=none\"] and reload dockerd; `agentguard doctor` checks this) — agentguard never falls back to another runtime"
    )]
    UnknownRuntime {
        /// The runtime asked for.
        runtime: String,
        /// The engine.
        engine: EngineKind,
    },
    /// The engine's daemon (or service) is not running or not reachable.
    #[error(
        "the {engine} engine is not running or not reachable: {message}; start it (for Docker: `dockerd`, or `systemctl start docker`) and check with `agentguard doctor`"
    )]
    EngineNotRunning {
        /// The engine.
        engine: EngineKind,
        /// What it said on stderr.
        message: String,
    },
    /// The engine program could not be started.
    #[error(
        "cannot start the engine program {program}; install docker or podman, or set `engine` to its path",
        program = program.display()
    )]
    EngineMissing {
        /// The program.
        program: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The process is out of file descriptors: the engine program could not be started now,
    /// though it exists. Retryable once other runs end.
    #[error(
        "cannot start the engine program {program} now: this process is out of file descriptors (other runs hold them); the command did not start, try again when they end",
        program = program.display()
    )]
    OutOfDescriptors {
        /// The program.
        program: PathBuf,
        /// The OS error (EMFILE or ENFILE).
        #[source]
        source: std::io::Error,
    },
    /// The engine could not mount the relay or the egress proxy's socket into the container:
    /// the run never starts without its proxy.
    #[error(
        "the {engine} engine could not mount the egress relay or the proxy's socket, so the command did not start: {message}; under gVisor, runsc must run with --host-uds=open (`cargo xtask setup` registers it, `agentguard doctor` checks it)"
    )]
    RelayMount {
        /// The engine.
        engine: EngineKind,
        /// What it said on stderr.
        message: String,
    },
    /// agentguard stopped the run (its timeout, its output limit) but the engine did not kill
    /// and remove the container, even when tried again: it may still run.
    #[error(
        "the {engine} engine did not kill container {container}, which may still be running: {message}; check `{engine} ps` and remove it (`agentguard gc` does)"
    )]
    KillFailed {
        /// The container's name.
        container: String,
        /// The engine.
        engine: EngineKind,
        /// What happened on the last try.
        message: String,
    },
    /// A rootless engine would run the container without its memory, cpus and pids limits.
    #[error(
        "rootless {engine} would run the container with no memory, cpus or pids limit: {why}; nothing was started. Fix: {fix}",
        fix = ROOTLESS_FIX
    )]
    LimitsNotEnforced {
        /// The engine.
        engine: EngineKind,
        /// Why the limits would not apply.
        why: String,
    },
    /// The isolation receipt taken inside the container failed, or none came: the command was
    /// never started (the relay runs it only after every check held).
    #[error(
        "the isolation check inside the container failed before the command started ({what}); the command never ran. Check the engine's flags (`agentguard run --dry-run`) and `agentguard doctor`"
    )]
    IsolationFailed {
        /// Each failed check and what was seen, or why there was no receipt.
        what: String,
    },
    /// The engine failed in another way (exit status 125).
    #[error("the {engine} engine failed (exit status 125) before the command ran: {message}")]
    Engine {
        /// The engine.
        engine: EngineKind,
        /// What it said on stderr.
        message: String,
    },
    /// `check` is set and the command did not exit 0.
    #[error("command {:?} failed: {} with exit code {:?}", .0.command, .0.status.as_str(), .0.exit_code)]
    Failed(Box<RunResult>),
    /// The run could not be recorded in the audit log.
    #[error("the run could not be recorded in the audit log")]
    Audit(#[from] agentguard_audit::Error),
    /// The run's writable or hidden paths could not be prepared; nothing was started.
    #[error(transparent)]
    Paths(#[from] crate::masks::MaskError),
    /// Reading the engine's output or waiting for it failed.
    #[error("{action} failed")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// Why the engine program could not be started: out of descriptors (EMFILE, ENFILE: the
    /// program is there, this process has none left), or missing.
    pub(crate) fn spawn(program: PathBuf, source: std::io::Error) -> RunError {
        match source.raw_os_error() {
            Some(23 | 24) => RunError::OutOfDescriptors { program, source },
            // ENOENT, EACCES, ENOEXEC: the engine is not there or cannot be run.
            Some(2 | 8 | 13) | None => RunError::EngineMissing { program, source },
            // E2BIG and the rest are no missing engine.
            _ => RunError::Io {
                action: "starting the engine",
                source,
            },
        }
    }

    /// True when the same run may succeed if tried again later (the process was out of
    /// descriptors), as opposed to a mistake or a missing part that needs fixing first.
    pub fn is_retryable(&self) -> bool {
        matches!(self, RunError::OutOfDescriptors { .. })
    }

    /// A stable snake_case reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            RunError::Denied(d) => d.reason.code(),
            RunError::MissingImage { .. } => "missing_image",
            RunError::ImagePin { .. } => "image_pin_mismatch",
            RunError::ImageCache { .. } => "image_unpack_failed",
            RunError::UnknownRuntime { .. } => "unknown_runtime",
            RunError::EngineNotRunning { .. } => "engine_not_running",
            RunError::EngineMissing { .. } => "engine_missing",
            RunError::OutOfDescriptors { .. } => "out_of_descriptors",
            RunError::RelayMount { .. } => "relay_mount_failed",
            RunError::Engine { .. } => "engine_error",
            RunError::KillFailed { .. } => "kill_failed",
            RunError::LimitsNotEnforced { .. } => "limits_not_enforced",
            RunError::IsolationFailed { .. } => "isolation_failed",
            RunError::Failed(_) => "command_failed",
            RunError::Audit(_) => "audit_failed",
            RunError::Io { .. } => "io_error",
            RunError::Paths(_) => "workspace_paths",
        }
    }
}

#[cfg(test)]
mod spawn_tests {
    use super::RunError;

    #[test]
    fn out_of_descriptors_is_itself_and_retryable_never_a_missing_engine() {
        for (errno, reason, retryable) in [
            (24, "out_of_descriptors", true),
            (23, "out_of_descriptors", true),
            (2, "engine_missing", false),
            (13, "engine_missing", false),
            // Issue 34, item 15: an argument list too long is never a missing engine.
            (7, "io_error", false),
        ] {
            let error = RunError::spawn("docker".into(), std::io::Error::from_raw_os_error(errno));
            assert_eq!(
                (error.reason(), error.is_retryable()),
                (reason, retryable),
                "{errno}"
            );
        }
    }
}

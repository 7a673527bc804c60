//! What a run returns: how it ended, its exit code, its captured output.

use std::time::Duration;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// The command exited by itself (see the exit code).
    Exited,
    /// The time limit was reached; agentguard killed the container by name.
    TimedOut,
    /// Stdout plus stderr exceeded the cap; agentguard killed the container by name.
    OutputLimit,
    /// The container died of SIGKILL that agentguard did not send: the memory limit when the
    /// engine says so ([`RunResult::oom_killed`]), otherwise a cause the engine does not name
    /// (the command may have killed the container's init, as it can under gVisor).
    Killed,
}

impl RunStatus {
    /// The wire name used in JSON and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Exited => "exited",
            RunStatus::TimedOut => "timed_out",
            RunStatus::OutputLimit => "output_limit",
            RunStatus::Killed => "killed",
        }
    }
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    /// The allowlisted command name.
    pub command: String,
    /// How it ended.
    pub status: RunStatus,
    /// The exit code the engine reported (137 after a kill), if it exited at all.
    pub exit_code: Option<i32>,
    /// Captured stdout (within the cap).
    pub stdout: Vec<u8>,
    /// Captured stderr (within the cap).
    pub stderr: Vec<u8>,
    /// True when output was cut at the cap.
    pub truncated: bool,
    /// Wall time of the run.
    pub duration: Duration,
    /// The container's unique name.
    pub container: String,
    /// True only when the engine reported that the container was killed for its memory limit
    /// (Kubernetes' `OOMKilled`); a local engine's `--rm` run never reports it.
    pub oom_killed: bool,
}

impl RunResult {
    /// True for a command that exited with status 0.
    pub fn success(&self) -> bool {
        self.status == RunStatus::Exited && self.exit_code == Some(0)
    }
}

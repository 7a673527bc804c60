//! Running the hardened argv: the only place in the workspace that spawns a container engine.
//!
//! A run gives the container a unique name and owner/deadline labels, starts the engine CLI
//! with a cleaned environment, reads stdout and stderr separately under one byte cap, and
//! on timeout or overflow kills the container BY NAME (killing the `docker run` client would
//! leave the container running) and removes it. Engine failures (exit status 125: a missing
//! image, an unknown runtime, a daemon that is not running) are typed errors, never a
//! "tool failed" result. Every run is recorded through the audit sink; environment values
//! never are.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use agentguard_audit::{AuditSink, Decision, Event};
use agentguard_policy::Denial;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use crate::argv::{Invocation, RunIdentity};
use crate::engine::EngineKind;
use crate::spec::{ContainerSpec, ImagePin};

/// How long the output may keep flowing after agentguard killed a container.
const KILL_GRACE: Duration = Duration::from_secs(30);

/// Label keys on every container agentguard starts.
pub const LABEL_OWNER: &str = "agentguard.owner";
/// The owner's process start time (clock ticks since boot), so a reused pid is not the owner.
pub const LABEL_OWNER_START: &str = "agentguard.owner-start";
/// Unix time after which the container is stale whatever its owner.
pub const LABEL_DEADLINE: &str = "agentguard.deadline";

/// Host environment variables the engine CLI may need to find its daemon; nothing else is
/// passed to it.
const ENGINE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "CONTAINER_HOST",
    "CONTAINER_CONNECTION",
    "CONTAINERS_CONF",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
];

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// The command exited by itself (see the exit code).
    Exited,
    /// The time limit was reached; agentguard killed the container by name.
    TimedOut,
    /// Stdout plus stderr exceeded the cap; agentguard killed the container by name.
    OutputLimit,
    /// The container died of SIGKILL that agentguard did not send: probably the memory limit
    /// (OOM), since `--rm` removes the container before its OOM flag can be read.
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
}

impl RunResult {
    /// True for a command that exited with status 0.
    pub fn success(&self) -> bool {
        self.status == RunStatus::Exited && self.exit_code == Some(0)
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
        /// What it said.
        message: String,
    },
    /// The engine program could not be started.
    #[error(
        "cannot start the engine program {program}: {message}; install docker or podman, or set `engine` to its path"
    )]
    EngineMissing {
        /// The program.
        program: PathBuf,
        /// The OS error.
        message: String,
    },
    /// The engine failed in another way (exit status 125).
    #[error("the {engine} engine failed (exit status 125) before the command ran: {message}")]
    Engine {
        /// The engine.
        engine: EngineKind,
        /// Its stderr.
        message: String,
    },
    /// `check` is set and the command did not exit 0.
    #[error("command {:?} failed: {} with exit code {:?}", .0.command, .0.status.as_str(), .0.exit_code)]
    Failed(Box<RunResult>),
    /// The run could not be recorded in the audit log.
    #[error("the run could not be recorded in the audit log: {0}")]
    Audit(#[from] agentguard_audit::Error),
    /// Reading the engine's output or waiting for it failed.
    #[error("I/O error while running the engine: {0}")]
    Io(String),
}

impl RunError {
    /// A stable snake_case reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            RunError::Denied(d) => d.reason.code(),
            RunError::MissingImage { .. } => "missing_image",
            RunError::ImagePin { .. } => "image_pin_mismatch",
            RunError::UnknownRuntime { .. } => "unknown_runtime",
            RunError::EngineNotRunning { .. } => "engine_not_running",
            RunError::EngineMissing { .. } => "engine_missing",
            RunError::Engine { .. } => "engine_error",
            RunError::Failed(_) => "command_failed",
            RunError::Audit(_) => "audit_failed",
            RunError::Io(_) => "io_error",
        }
    }
}

/// Runs allowlisted commands of one spec (the seed's `ContainerExecutor`).
pub struct ContainerExecutor {
    spec: ContainerSpec,
    audit: Option<Arc<dyn AuditSink>>,
    stream: bool,
}

impl ContainerExecutor {
    /// An executor for a validated spec.
    pub fn new(spec: ContainerSpec) -> ContainerExecutor {
        ContainerExecutor {
            spec,
            audit: None,
            stream: false,
        }
    }

    /// Also copies the kept output to this process's stdout and stderr as it arrives.
    pub fn with_streaming(mut self, stream: bool) -> ContainerExecutor {
        self.stream = stream;
        self
    }

    /// Records every run in `sink`.
    pub fn with_audit(mut self, sink: Arc<dyn AuditSink>) -> ContainerExecutor {
        self.audit = Some(sink);
        self
    }

    /// The spec.
    pub fn spec(&self) -> &ContainerSpec {
        &self.spec
    }

    /// A fresh unique name and the owner/deadline labels for one run.
    pub fn identity(&self) -> RunIdentity {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let pid = std::process::id();
        let deadline = now + self.spec.timeout + Duration::from_secs(60);
        RunIdentity {
            name: format!(
                "agentguard-{pid}-{}-{}",
                now.as_millis() % 1_000_000_000,
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ),
            labels: vec![
                (LABEL_OWNER.into(), pid.to_string()),
                (
                    LABEL_OWNER_START.into(),
                    process_start(pid).unwrap_or_default(),
                ),
                (LABEL_DEADLINE.into(), deadline.as_secs().to_string()),
            ],
        }
    }

    /// Runs the allowlisted command `name`: only an exact name selects an argv.
    ///
    /// Containers left behind by crashed runs are swept at the same time, off the run's path.
    pub async fn run(&self, name: &str) -> Result<RunResult, RunError> {
        self.run_with(name, &self.identity()).await
    }

    /// [`ContainerExecutor::run`] with a given identity, so a caller can kill the container by
    /// name if it must stop the run (Ctrl-C).
    pub async fn run_with(
        &self,
        name: &str,
        identity: &RunIdentity,
    ) -> Result<RunResult, RunError> {
        if let Err(denial) = self.spec.commands().get(name) {
            // A name off the allowlist never reaches the engine, not even for the sweep.
            if let Some(sink) = &self.audit {
                sink.record(Event::container_run(
                    Decision::Deny,
                    denial.reason.code(),
                    name,
                    self.spec.image(),
                ))?;
            }
            return Err(RunError::Denied(denial));
        }
        let engine = self.spec.engine().clone();
        let sweeper = tokio::spawn(async move { crate::gc::sweep(&engine, false).await });
        let outcome = self.run_as(name, identity).await;
        match sweeper.await {
            Ok(Ok(stale)) if !stale.is_empty() => {
                tracing::info!(removed = stale.len(), "removed stale agentguard containers")
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "sweeping stale containers failed"),
            _ => {}
        }
        if let Some(sink) = &self.audit {
            let image = self.spec.image();
            let event = match &outcome {
                Ok(r) => Event::container_run(Decision::Allow, r.status.as_str(), name, image)
                    .data("status", r.status.as_str())
                    .data("exit_code", r.exit_code)
                    .data("duration_ms", r.duration.as_millis() as u64)
                    .data("truncated", r.truncated)
                    .data("container", r.container.as_str()),
                Err(RunError::Denied(d)) => {
                    Event::container_run(Decision::Deny, d.reason.code(), name, image)
                }
                Err(RunError::Failed(r)) => {
                    Event::container_run(Decision::Allow, "command_failed", name, image)
                        .data("status", r.status.as_str())
                        .data("exit_code", r.exit_code)
                        .data("duration_ms", r.duration.as_millis() as u64)
                        .data("container", r.container.as_str())
                }
                Err(e) => Event::container_run(Decision::Error, e.reason(), name, image)
                    .data("message", e.to_string()),
            };
            sink.record(event)?;
        }
        outcome
    }

    /// Runs with a given identity (the CLI uses this to kill by name on Ctrl-C).
    pub async fn run_as(&self, name: &str, identity: &RunIdentity) -> Result<RunResult, RunError> {
        let invocation = self
            .spec
            .invocation(name, identity)
            .map_err(RunError::Denied)?;
        self.verify_pin().await?;
        let started = Instant::now();
        let mut command = engine_command(&invocation);
        let mut child = command.spawn().map_err(|e| RunError::EngineMissing {
            program: invocation.program.clone(),
            message: e.to_string(),
        })?;
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let deadline = tokio::time::Instant::from_std(started + self.spec.timeout);
        let cap = self.spec.max_output_bytes;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut out_chunk, mut err_chunk) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
        let mut status = RunStatus::Exited;
        let mut truncated = false;
        // The kill runs in its own task while this loop keeps draining the pipes: the daemon
        // does not finish a kill while the client's output pipe is full.
        let mut killer: Option<tokio::task::JoinHandle<()>> = None;
        let mut drain_until: Option<tokio::time::Instant> = None;
        let mut hung = false;
        while stdout.is_some() || stderr.is_some() {
            tokio::select! {
                n = read_some(&mut stdout, &mut out_chunk), if stdout.is_some() => match n {
                    Some(n) => truncated |= keep(&mut out, err.len(), &out_chunk[..n], cap, self.stream.then(|| Box::new(std::io::stdout()) as Box<dyn std::io::Write>)),
                    None => stdout = None,
                },
                n = read_some(&mut stderr, &mut err_chunk), if stderr.is_some() => match n {
                    Some(n) => truncated |= keep(&mut err, out.len(), &err_chunk[..n], cap, self.stream.then(|| Box::new(std::io::stderr()) as Box<dyn std::io::Write>)),
                    None => stderr = None,
                },
                () = tokio::time::sleep_until(deadline), if killer.is_none() => {
                    status = RunStatus::TimedOut;
                    killer = Some(self.spawn_kill(&identity.name));
                    drain_until = Some(tokio::time::Instant::now() + KILL_GRACE);
                }
                // After a kill the output must end soon; never wait on a hung client forever.
                () = tokio::time::sleep_until(drain_until.unwrap_or(deadline)), if drain_until.is_some() => {
                    hung = true;
                    break;
                }
            }
            if truncated && killer.is_none() {
                status = RunStatus::OutputLimit;
                killer = Some(self.spawn_kill(&identity.name));
                drain_until = Some(tokio::time::Instant::now() + KILL_GRACE);
            }
        }
        if hung {
            // The client kept its output open past the grace period: it is killed too.
            let _ = child.start_kill();
        }
        let killed = killer.is_some();
        if let Some(killer) = killer {
            let _ = killer.await;
        }
        let exit = match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
            Ok(Ok(exit)) => exit,
            Ok(Err(e)) => return Err(RunError::Io(e.to_string())),
            Err(_) => {
                self.kill_by_name(&identity.name).await;
                let _ = child.kill().await;
                return Err(RunError::Io(
                    "the engine client did not exit after its output closed".into(),
                ));
            }
        };
        let exit_code = exit.code();
        if !killed && exit_code == Some(125) {
            return Err(self.classify_engine_error(&String::from_utf8_lossy(&err)));
        }
        if !killed && exit_code == Some(137) {
            status = RunStatus::Killed;
        }
        let result = RunResult {
            command: name.to_owned(),
            status,
            exit_code,
            stdout: out,
            stderr: err,
            truncated,
            duration: started.elapsed(),
            container: identity.name.clone(),
        };
        if self.spec.check() && !result.success() {
            return Err(RunError::Failed(Box::new(result)));
        }
        Ok(result)
    }

    /// Kills the container by name, then removes it; errors are ignored (it may be gone).
    pub async fn kill_by_name(&self, name: &str) {
        let _ = self.spawn_kill(name).await;
    }

    fn spawn_kill(&self, name: &str) -> tokio::task::JoinHandle<()> {
        let kill = self.spec.engine_command(&["kill", name]);
        let remove = self.spec.engine_command(&["rm", "-f", name]);
        tokio::spawn(async move {
            let _ = run_quiet(&kill).await;
            let _ = run_quiet(&remove).await;
        })
    }

    /// For `name@sha256:...` and `sha256:<id>`, checks the local image before running.
    async fn verify_pin(&self) -> Result<(), RunError> {
        let image = self.spec.image();
        let (format, want) = match self.spec.image_pin() {
            ImagePin::Tag => return Ok(()),
            ImagePin::Digest(d) => ("{{json .RepoDigests}}", format!("@sha256:{d}")),
            ImagePin::Id(id) => ("{{.Id}}", format!("sha256:{id}")),
        };
        let output = run_quiet(
            &self
                .spec
                .engine_command(&["image", "inspect", "--format", format, image]),
        )
        .await
        .map_err(|e| RunError::Io(e.to_string()))?;
        if !output.status.success() {
            return Err(self.classify_engine_error(&String::from_utf8_lossy(&output.stderr)));
        }
        let seen = String::from_utf8_lossy(&output.stdout);
        let matches = match self.spec.image_pin() {
            // Docker prints `sha256:<id>`, Podman the bare ID.
            ImagePin::Id(_) => {
                seen.trim().trim_start_matches("sha256:") == want.trim_start_matches("sha256:")
            }
            _ => seen.contains(&want),
        };
        if matches {
            Ok(())
        } else {
            Err(RunError::ImagePin {
                image: image.to_owned(),
                reason: format!("the local image has {}", seen.trim()),
            })
        }
    }

    pub(crate) fn classify_engine_error(&self, stderr: &str) -> RunError {
        let engine = self.spec.engine().kind;
        let lower = stderr.to_ascii_lowercase();
        let message = stderr.trim().to_owned();
        if lower.contains("no such image")
            || lower.contains("image not known")
            || lower.contains("unable to find image")
            || lower.contains("not found in local storage")
        {
            RunError::MissingImage {
                image: self.spec.image().to_owned(),
                engine,
            }
        } else if lower.contains("unknown or invalid runtime")
            || lower.contains("unknown runtime")
            || lower.contains("could not find runtime")
            || lower.contains("runtime") && lower.contains("not found")
        {
            RunError::UnknownRuntime {
                runtime: self.spec.runtime().unwrap_or("default").to_owned(),
                engine,
            }
        } else if lower.contains("cannot connect to the docker daemon")
            || lower.contains("is the docker daemon running")
            || lower.contains("unable to connect to podman")
        {
            RunError::EngineNotRunning { engine, message }
        } else {
            RunError::Engine { engine, message }
        }
    }
}

/// Appends what fits under the cap (shared by stdout and stderr), and copies it to `tee`;
/// true when something was cut.
pub(crate) fn keep(
    buf: &mut Vec<u8>,
    other: usize,
    data: &[u8],
    cap: usize,
    tee: Option<Box<dyn std::io::Write>>,
) -> bool {
    let room = cap.saturating_sub(buf.len() + other);
    let take = room.min(data.len());
    buf.extend_from_slice(&data[..take]);
    if let Some(mut out) = tee {
        let _ = out.write_all(&data[..take]).and_then(|()| out.flush());
    }
    take < data.len()
}

async fn read_some<R: AsyncRead + Unpin>(reader: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    let r = reader.as_mut()?;
    match r.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// The engine process: cleaned environment, no stdin, piped output, killed if dropped.
fn engine_command(invocation: &Invocation) -> Command {
    let mut command = Command::new(&invocation.program);
    command
        .args(&invocation.args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for key in ENGINE_ENV {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    command
}

/// Runs an engine command to completion (bounded at 60 s), capturing its output.
pub(crate) async fn run_quiet(invocation: &Invocation) -> std::io::Result<std::process::Output> {
    let mut command = engine_command(invocation);
    match tokio::time::timeout(Duration::from_secs(60), command.output()).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the engine command did not finish in 60 s",
        )),
    }
}

/// The start time of a process in clock ticks since boot (field 22 of `/proc/PID/stat`), so a
/// reused pid is not mistaken for the owner.
pub(crate) fn process_start(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it follow the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19).map(str::to_owned)
}

//! Process plumbing at the bottom of the crate: the one way to build and spawn an engine
//! command, the labels every container carries, and what `/proc` says about processes.
//!
//! Everything that starts an engine CLI (a run, a kill, the stale-container sweep, doctor's
//! queries) goes through [`Engine::command`] and [`spawn`], so each gets the same cleaned
//! environment, no stdin, and the global flags (Podman's runtime selection) of its spec.

use std::ffi::OsString;

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::process::Command;

use crate::argv::{EngineCommand, RunIdentity};
use crate::engine::Engine;

/// Label keys on every container agentguard starts.
pub const LABEL_OWNER: &str = "agentguard.owner";
/// The owner's process start time (clock ticks since boot), so a reused pid is not the owner.
pub const LABEL_OWNER_START: &str = "agentguard.owner-start";
/// Unix time after which the container is stale whatever its owner.
pub const LABEL_DEADLINE: &str = "agentguard.deadline";

/// How long a quiet engine command (`kill`, `rm`, `ps`, `inspect`, `info`) may take.
const QUIET_LIMIT: Duration = Duration::from_secs(60);

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

impl Engine {
    /// An engine command: the global flags (which come before any subcommand), then `args`.
    pub fn command<S: AsRef<str>>(&self, global: &[String], args: &[S]) -> EngineCommand {
        EngineCommand {
            program: self.program.clone(),
            args: global
                .iter()
                .map(OsString::from)
                .chain(args.iter().map(|a| OsString::from(a.as_ref())))
                .collect(),
        }
    }
}

/// The engine process: cleaned environment, no stdin, piped output, killed if dropped.
pub(crate) fn spawn_command(invocation: &EngineCommand) -> Command {
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
pub(crate) async fn run_quiet(invocation: &EngineCommand) -> std::io::Result<std::process::Output> {
    let mut command = spawn_command(invocation);
    match tokio::time::timeout(QUIET_LIMIT, command.output()).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the engine command did not finish in {QUIET_LIMIT:?}"),
        )),
    }
}

/// Runs an engine command with its stdout going to `file` (an image saved from a store),
/// capturing stderr.
pub(crate) async fn run_into(
    invocation: &EngineCommand,
    file: std::fs::File,
) -> std::io::Result<std::process::Output> {
    let mut command = spawn_command(invocation);
    // `output()` would pipe stdout again: spawn, then wait.
    command.stdout(Stdio::from(file));
    command.spawn()?.wait_with_output().await
}

/// A fresh unique container name and the owner/deadline labels for one run that may last
/// `timeout`.
pub(crate) fn identity(timeout: Duration) -> RunIdentity {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let pid = std::process::id();
    // Saturating: a library caller's timeout never panics here (the spec bounds it anyway).
    let deadline = now
        .saturating_add(timeout)
        .saturating_add(Duration::from_secs(60));
    RunIdentity {
        masks: None,
        image_id: None,
        client: None,
        receipt: None,
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
        relay: None,
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

/// Descriptors held for a run's kill from before the run starts: two engine commands, each
/// with its stdout and stderr pipes, one at a time. Dropped (given back) just before the kill.
#[derive(Debug)]
pub(crate) struct Reserve(#[allow(dead_code)] Vec<std::fs::File>);

/// Descriptors a kill needs at once: one engine command's two pipes, two ends each.
const RESERVED_FOR_KILL: usize = 4;

impl Reserve {
    /// Takes the descriptors, or says the process has none to spare (EMFILE).
    pub(crate) fn take() -> std::io::Result<Reserve> {
        (0..RESERVED_FOR_KILL)
            .map(|_| std::fs::File::open("/dev/null"))
            .collect::<std::io::Result<Vec<_>>>()
            .map(Reserve)
    }
}

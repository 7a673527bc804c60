//! Running the hardened argv: the only place in the workspace that starts a container.
//!
//! A call is checked once ([`ContainerExecutor::invoke`]: its NAME looked up, its params'
//! values checked, lexically and on the host); a run takes that checked invocation, gives the
//! container a unique name
//! and owner/deadline labels, starts the engine CLI with a cleaned environment, captures
//! output under one cap, and on timeout or overflow kills the container BY NAME (killing the
//! `docker run` client would leave the container running) and removes it. Engine failures
//! (exit status 125: a missing image, an unknown runtime, a daemon that is not running) are
//! typed errors, never a "tool failed" result. Every run is recorded through the audit sink;
//! environment values never are.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentguard_audit::AuditSink;

use agentguard_policy::{Arg, Invocation};

use crate::argv::{EngineCommand, RunIdentity};
use crate::capture::{OutputMeter, Plan, Stop, capture, copy_held};
use crate::classify::{classify, engine_failed};
use crate::error::RunError;
use crate::kind::EngineKind;
use crate::process::spawn_command;
use crate::receipt::Receipt;
use crate::record::Ran;
use crate::result::{RunResult, RunStatus};
use crate::spec::ContainerSpec;

/// How long output may keep flowing after agentguard killed a container, and how long the
/// client may take to exit after its output closed, unless set otherwise.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(30);

/// Runs allowlisted commands of one spec (the seed's `ContainerExecutor`).
pub struct ContainerExecutor {
    spec: ContainerSpec,
    audit: Option<Arc<dyn AuditSink>>,
    streaming: Streaming,
    pub(crate) drain_grace: Duration,
    config_sha256: Option<String>,
    receipt: Option<std::path::PathBuf>,
}

/// Whether a run's output is copied to this process's stdout and stderr as it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Streaming {
    /// Only captured (the result holds it).
    #[default]
    Off,
    /// Copied; a stream that is a terminal gets it neutralized ([`crate::Neutralized`]), so
    /// no escape sequence or control character of the command's reaches the operator.
    Safe,
    /// Copied byte for byte, even to a terminal (`agentguard run --raw`).
    Raw,
}

/// One run as `execute` takes it: the command's effective spec, its name, the engine command
/// and the identity (its masks found).
struct Run<'a> {
    spec: &'a ContainerSpec,
    name: &'a str,
    command: &'a EngineCommand,
    identity: &'a RunIdentity,
}

impl ContainerExecutor {
    /// An executor for a validated spec.
    pub fn new(spec: ContainerSpec) -> ContainerExecutor {
        ContainerExecutor {
            spec,
            audit: None,
            streaming: Streaming::Off,
            drain_grace: DEFAULT_DRAIN_GRACE,
            config_sha256: None,
            receipt: None,
        }
    }

    /// Whether the kept output is also copied to this process's stdout and stderr as it
    /// arrives, and how ([`Streaming`]).
    pub fn with_streaming(mut self, streaming: Streaming) -> ContainerExecutor {
        self.streaming = streaming;
        self
    }

    /// Records every run in `sink`.
    pub fn with_audit(mut self, sink: Arc<dyn AuditSink>) -> ContainerExecutor {
        self.audit = Some(sink);
        self
    }

    /// How long output may keep flowing after a kill, and how long the engine client may take
    /// to exit once its output closed (default 30 s); past it the client is killed too.
    pub fn with_drain_grace(mut self, grace: Duration) -> ContainerExecutor {
        self.drain_grace = grace;
        self
    }

    /// The SHA-256 of the config in force, written into every `container_run` event.
    pub fn with_config_sha256(mut self, digest: impl Into<String>) -> ContainerExecutor {
        self.config_sha256 = Some(digest.into());
        self
    }

    /// The spec.
    pub fn spec(&self) -> &ContainerSpec {
        &self.spec
    }

    /// Every run of [`ContainerExecutor::identity`] takes the isolation receipt with the relay
    /// program at `program` (a static executable on the host, mounted read-only), which is
    /// then the container's init. `engine = "oci"` needs it; `agentguard_sandbox::Sandbox`
    /// gives each run its own copy.
    pub fn with_receipt(mut self, program: impl Into<std::path::PathBuf>) -> ContainerExecutor {
        self.receipt = Some(program.into());
        self
    }

    /// A fresh unique name and the owner/deadline labels for one run (and the receipt
    /// program, when one was given).
    pub fn identity(&self) -> RunIdentity {
        RunIdentity {
            receipt: self.receipt.clone(),
            ..crate::process::identity(self.spec.longest_timeout())
        }
    }

    /// The allowlisted command `name` with `args` checked ([`ContainerSpec::invoke`]); a
    /// refusal (`command_not_allowed`, `invalid_arguments`) is recorded and nothing starts.
    pub fn invoke(&self, name: &str, args: &[(String, Arg)]) -> Result<Invocation, RunError> {
        self.spec.invoke(name, args).or_else(|denial| {
            let error = RunError::Denied(denial);
            let what = Ran {
                name,
                config_sha256: self.config_sha256.as_deref(),
                ..Ran::default()
            };
            self.record(&what, Err(&error))?;
            Err(error)
        })
    }

    /// Runs a checked invocation (see [`ContainerExecutor::invoke`]).
    ///
    /// Containers left behind by crashed runs are swept at the same time, off the run's path.
    pub async fn run(&self, invocation: &Invocation) -> Result<RunResult, RunError> {
        self.run_with(invocation, &self.identity()).await
    }

    /// [`ContainerExecutor::run`] with a given identity, so a caller can kill the container by
    /// name if it must stop the run (Ctrl-C).
    pub async fn run_with(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
    ) -> Result<RunResult, RunError> {
        self.run_metered(invocation, identity, None).await
    }

    /// [`ContainerExecutor::run_with`], counting the output as it arrives in `meter` (for
    /// progress reports).
    pub async fn run_metered(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
        meter: Option<&OutputMeter>,
    ) -> Result<RunResult, RunError> {
        // The command's own values: its limits, workspace mode and paths.
        let spec = self.spec.for_command(invocation.command());
        let engine = self.spec.engine().clone();
        let global = self.spec.global_args();
        let sweeper = tokio::spawn(async move { crate::gc::sweep(&engine, &global, false).await });
        let prepared = match self.before_start().await {
            Ok(image_id) => spec
                .prepare_run(identity)
                .map(|identity| RunIdentity {
                    image_id: Some(image_id),
                    ..identity
                })
                .map_err(RunError::Paths),
            Err(error) => Err(error),
        };
        let mut receipt = None;
        let (outcome, ran) = match prepared {
            Ok(identity) => match crate::oci::command_of(&spec, invocation, &identity) {
                Ok((command, _bundle)) => {
                    let run = Run {
                        spec: &spec,
                        name: invocation.command(),
                        command: &command,
                        identity: &identity,
                    };
                    (self.execute(run, meter, &mut receipt).await, Some(identity))
                }
                Err(error) => (Err(error), None),
            },
            Err(error) => (Err(error), None),
        };
        match sweeper.await {
            Ok(Ok(stale)) if !stale.is_empty() => {
                tracing::info!(removed = stale.len(), "removed stale agentguard containers")
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "sweeping stale containers failed"),
            _ => {}
        }
        // The receipt comes first in the log: what the container was, then how the run ended.
        if let (Some(receipt), Some(sink), Some(ran)) = (&receipt, &self.audit, &ran) {
            sink.record(receipt.event(invocation.command(), &ran.name))?;
        }
        let what = Ran {
            name: invocation.command(),
            params: invocation.params(),
            argv: ran.as_ref().map(|_| invocation.argv()),
            image_id: ran.as_ref().and_then(|i| i.image_id.as_deref()),
            client: identity.client.as_deref(),
            config_sha256: self.config_sha256.as_deref(),
            container: ran.as_ref().map(|i| i.name.as_str()),
        };
        self.record(&what, outcome.as_ref())?;
        outcome
    }

    /// Records a run's `container_run` event, when there is a sink.
    fn record(
        &self,
        what: &Ran<'_>,
        outcome: Result<&RunResult, &RunError>,
    ) -> Result<(), RunError> {
        let Some(sink) = &self.audit else {
            return Ok(());
        };
        sink.record(crate::record::container_run(&self.spec, what, outcome))?;
        Ok(())
    }

    /// Records a run of `name` in `container` that its caller stopped before it concluded
    /// (a signal, a cancelled call, a server stopping): its future was dropped, so the run
    /// itself recorded nothing. `reason` is the stop's code (`interrupted`, `cancelled`,
    /// `shutting_down`), `signal` the signal's name when there was one.
    pub fn record_stopped(
        &self,
        name: &str,
        container: &str,
        reason: &str,
        signal: Option<&str>,
    ) -> Result<(), RunError> {
        let Some(sink) = &self.audit else {
            return Ok(());
        };
        let what = Ran {
            name,
            config_sha256: self.config_sha256.as_deref(),
            ..Ran::default()
        };
        sink.record(crate::record::stopped(
            &self.spec, &what, container, reason, signal,
        ))?;
        Ok(())
    }

    /// How a run of `spec` started at `started` is captured.
    fn plan(&self, spec: &ContainerSpec, started: Instant, identity: &RunIdentity) -> Plan {
        Plan {
            // The spec bounds the timeout (MAX_TIMEOUT): this cannot overflow.
            deadline: tokio::time::Instant::from_std(started + spec.timeout()),
            cap: spec.max_output_bytes(),
            drain_grace: self.drain_grace,
            tee: self.streaming != Streaming::Off,
            neutralize: self.streaming == Streaming::Safe,
            receipt: identity.takes_receipt(),
        }
    }

    /// Starts the engine and captures the run.
    async fn execute(
        &self,
        run: Run<'_>,
        meter: Option<&OutputMeter>,
        receipt: &mut Option<Receipt>,
    ) -> Result<RunResult, RunError> {
        let Run {
            spec,
            name,
            command: invocation,
            identity,
        } = run;
        let started = Instant::now();
        // The descriptors a kill needs are held from before the start until the kill.
        let reserve = crate::process::Reserve::take()
            .map_err(|source| RunError::spawn(invocation.program.clone(), source))?;
        let mut child = spawn_command(invocation)
            .spawn()
            .map_err(|source| RunError::spawn(invocation.program.clone(), source))?;
        let plan = self.plan(spec, started, identity);
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let captured = capture(stdout, stderr, plan, meter, || {
            self.spawn_kill(&identity.name, Some(reserve))
        })
        .await;
        if let (Some(_), Some(message)) = (captured.stop, &captured.kill_failed) {
            copy_held(&captured.held_stderr, plan);
            // Never a timeout or an output limit while the container may still run.
            let _ = child.start_kill();
            return Err(RunError::KillFailed {
                container: identity.name.clone(),
                engine: self.spec.engine().kind,
                message: message.clone(),
            });
        }
        if captured.hung {
            // The client kept its output open past the grace period: it is killed too.
            let _ = child.start_kill();
        }
        let exit = self.client_exit(&mut child, &identity.name).await?;
        let exit_code = exit.code();
        let kind = self.spec.engine().kind;
        if plan.receipt {
            let (taken, refused) = Receipt::of(kind, &captured, exit_code);
            *receipt = taken;
            if let Some(error) = refused {
                return Err(error);
            }
        }
        // An engine's failure is said once, in agentguard's message; anything else held back
        // from stderr is the command's and is copied now.
        let failed = engine_failed(kind, exit_code, &captured);
        if captured.stop.is_some() || !failed {
            copy_held(&captured.held_stderr, plan);
        }
        let status = match captured.stop {
            Some(Stop::TimedOut) => RunStatus::TimedOut,
            Some(Stop::OutputLimit) => RunStatus::OutputLimit,
            None if failed => {
                let stderr = String::from_utf8_lossy(&captured.stderr);
                return Err(classify(&self.spec, &stderr));
            }
            None if exit_code == Some(137) => RunStatus::Killed,
            None => RunStatus::Exited,
        };
        let result = RunResult {
            command: name.to_owned(),
            status,
            exit_code,
            stdout: captured.stdout,
            stderr: captured.stderr,
            truncated: captured.truncated,
            duration: started.elapsed(),
            container: identity.name.clone(),
            oom_killed: false,
        };
        self.checked(result)
    }

    /// True when a run would be refused before anything starts because this engine would not
    /// apply the limits (and their weakening is not accepted): a caller then makes nothing
    /// for the run, and [`ContainerExecutor::run_metered`] records the refusal.
    pub fn refuses_unenforced_limits(&self) -> bool {
        self.spec.unenforced_limits().is_some() && !self.spec.accepts_weakened_limits()
    }

    /// What must hold before any engine starts: limits this engine would enforce (or their
    /// weakening accepted), and the image the pin names; its ID, which the run then uses.
    async fn before_start(&self) -> Result<String, RunError> {
        if let Some(why) = self.spec.unenforced_limits()
            && !self.spec.accepts_weakened_limits()
        {
            return Err(RunError::LimitsNotEnforced {
                engine: self.spec.engine().kind,
                why,
            });
        }
        if self.spec.engine().kind == EngineKind::Oci {
            crate::oci::preflight()?;
        }
        crate::image::resolve(&self.spec).await
    }

    /// The result, or with `check` a failed one as an error.
    fn checked(&self, result: RunResult) -> Result<RunResult, RunError> {
        if self.spec.check() && !result.success() {
            return Err(RunError::Failed(Box::new(result)));
        }
        Ok(result)
    }
}

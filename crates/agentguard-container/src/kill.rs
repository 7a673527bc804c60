//! Killing a run's container by name: `kill`, then `rm -f` (an OCI runtime's `kill ID KILL`,
//! then `delete --force`), tried again until the engine says the container is gone, with the
//! descriptors for it held since before the run began; and the engine client's exit, waited
//! for at most the drain grace.

use std::time::Duration;

use crate::error::RunError;
use crate::executor::ContainerExecutor;
use crate::process::run_quiet;

/// How many times a kill (`kill`, then `rm -f`) is tried before the run is an engine error.
pub const KILL_ATTEMPTS: u32 = 3;
/// The pause before the second try of a kill (twice it before the third).
const KILL_PAUSE: Duration = Duration::from_millis(500);

impl ContainerExecutor {
    /// Kills the container by name, then removes it, retried until the engine says it is
    /// gone (see [`KILL_ATTEMPTS`]); a container that could not be removed is logged with its
    /// name (`agentguard gc` removes it later).
    pub async fn kill_by_name(&self, name: &str) {
        let message = match self.spawn_kill(name, None).await {
            Ok(Ok(())) => return,
            Ok(Err(message)) => message,
            Err(e) => format!("the kill task failed: {e}"),
        };
        tracing::error!(container = name, %message, "the container could not be killed");
    }

    /// The kill of `name` in its own task: `kill`, then `rm -f`, retried with a pause until
    /// `rm -f` succeeds or says there is no such container. `reserve` (descriptors held since
    /// before the run started) is given up just before the first engine command, so a
    /// process out of descriptors can still kill what it started.
    pub(crate) fn spawn_kill(
        &self,
        name: &str,
        reserve: Option<crate::process::Reserve>,
    ) -> tokio::task::JoinHandle<Result<(), String>> {
        let oci = self.spec().engine().kind == crate::kind::EngineKind::Oci;
        let (kill, remove) = if oci {
            crate::oci::kill_commands(self.spec(), name)
        } else {
            (
                self.spec().engine_command(&["kill", name]),
                self.spec().engine_command(&["rm", "-f", name]),
            )
        };
        let name = name.to_owned();
        tokio::spawn(async move {
            drop(reserve);
            let mut said = String::new();
            for attempt in 0..KILL_ATTEMPTS {
                if attempt > 0 {
                    tokio::time::sleep(KILL_PAUSE * attempt).await;
                }
                let _ = run_quiet(&kill).await;
                match run_quiet(&remove).await {
                    Ok(out) if out.status.success() => return Ok(()),
                    Ok(out) => {
                        said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
                        let lower = said.to_ascii_lowercase();
                        if lower.contains("no such container")
                            || lower.contains("no container with")
                            || oci && crate::oci::is_gone(&said)
                        {
                            return Ok(());
                        }
                    }
                    Err(e) => said = e.to_string(),
                }
            }
            Err(format!(
                "container {name} could not be killed and removed after {KILL_ATTEMPTS} attempts: {said}"
            ))
        })
    }

    /// The engine client's exit status, waited for at most the drain grace once its output
    /// closed; past it the container and the client are killed.
    pub(crate) async fn client_exit(
        &self,
        child: &mut tokio::process::Child,
        container: &str,
    ) -> Result<std::process::ExitStatus, RunError> {
        match tokio::time::timeout(self.drain_grace, child.wait()).await {
            Ok(Ok(exit)) => Ok(exit),
            Ok(Err(source)) => Err(RunError::Io {
                action: "waiting for the engine client",
                source,
            }),
            Err(_) => {
                self.kill_by_name(container).await;
                let _ = child.kill().await;
                Err(RunError::Io {
                    action: "waiting for the engine client to exit after its output closed",
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("still running after {:?}", self.drain_grace),
                    ),
                })
            }
        }
    }
}

//! `Executor`: a loaded configuration's sandbox, run from Python with the GIL released.
//!
//! The configuration arrives as one JSON object with the config file's keys (the Python layer
//! builds it from keyword arguments) and is loaded by `agentguard-config`, as the CLI loads
//! its file. A run is checked once (`Sandbox::invoke`) before anything starts, then awaited
//! on the shared runtime while the thread is detached from the interpreter; every
//! `SIGNAL_POLL` it re-attaches to check for signals (Ctrl-C) and its cancel token. A signal
//! or a cancel drops the run (its proxy stops, its folder goes), kills the container by name
//! and records the stop, as `agentguard run` does on SIGINT.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentguard_container::{RunIdentity, Streaming};
use agentguard_policy::Invocation;
use agentguard_sandbox::{Error as SandboxError, Finished, RunOptions, Sandbox};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors;

/// How often a detached run looks for a signal or a cancel.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// A run's way to be cancelled from another thread (`arun`'s task being cancelled).
#[pyclass(frozen, module = "agentguard._native")]
#[derive(Default)]
pub(crate) struct CancelToken {
    cancelled: Arc<AtomicBool>,
}

#[pymethods]
impl CancelToken {
    #[new]
    fn new() -> Self {
        CancelToken::default()
    }

    /// Asks the run holding this token to stop: its container is killed and removed.
    fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

/// Why a run was stopped before it ended.
enum Stop {
    /// A Python signal handler raised (KeyboardInterrupt): re-raised once the container is gone.
    Signal(PyErr),
    /// The token was cancelled.
    Cancelled,
}

/// One configuration's sandbox; threads may share it.
#[pyclass(frozen, module = "agentguard._native")]
pub(crate) struct Executor {
    sandbox: crate::Owned<Sandbox>,
    check: bool,
}

#[pymethods]
impl Executor {
    /// Loads `config` (a JSON object of config keys), relative paths against `base`.
    #[new]
    fn new(py: Python<'_>, config: &str, base: PathBuf) -> PyResult<Self> {
        let loaded = agentguard_config::from_json(config, "ContainerExecutor", &base)
            .and_then(|c| c.local_only("the Python package").map(|()| c))
            .map_err(|e| errors::config(py, e.as_ref()))?;
        let audit = agentguard_config::runs_log(loaded.audit.as_ref())
            .map_err(|e| errors::config(py, e.as_ref()))?;
        let check = loaded.spec.check();
        let _runtime = crate::runtime(py)?.enter();
        let sandbox = loaded
            .commands
            .sandbox(loaded.spec, audit, Streaming::Off)
            .map_err(|e| errors::config(py, e.as_ref()))?;
        Ok(Executor {
            sandbox: crate::Owned::new(sandbox),
            check,
        })
    }

    /// The allowlisted command names.
    fn commands(&self) -> Vec<String> {
        self.sandbox
            .executor()
            .spec()
            .commands()
            .names()
            .map(str::to_owned)
            .collect()
    }

    /// Runs `name` with `params` (a JSON object): `(result, failed)`, `failed` when `check`
    /// is set and the command did not exit 0. Refusals raise before anything starts.
    /// `observe` makes it an observe run (docs/learn.md); only `run` takes it, never `tool`.
    #[pyo3(signature = (name, params, cancel=None, observe=false))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        params: &str,
        cancel: Option<Py<CancelToken>>,
        observe: bool,
    ) -> PyResult<(Bound<'py, PyDict>, bool)> {
        crate::this_process(py)?;
        let invocation = self.invocation(py, name, params)?;
        match self.await_run(py, name, &invocation, cancel, observe)? {
            Ok(finished) => Ok((result(py, &finished)?, false)),
            Err(SandboxError::Failed(finished)) => Ok((result(py, &finished)?, true)),
            Err(e) => Err(errors::run(py, &e)),
        }
    }

    /// Runs `name` and returns the JSON object an agent sees, as `agentguard mcp` returns it
    /// (refusals and failures included, never raised): what a tool function hands the model.
    #[pyo3(signature = (name, params, cancel=None))]
    fn tool(
        &self,
        py: Python<'_>,
        name: &str,
        params: &str,
        cancel: Option<Py<CancelToken>>,
    ) -> PyResult<String> {
        use agentguard_mcp::result;
        crate::this_process(py)?;
        let invocation = match self.invocation_of(name, params) {
            Ok(invocation) => invocation,
            Err(e) => return Ok(result::run_error(name, &e).value.to_string()),
        };
        let outcome = match self.await_run(py, name, &invocation, cancel, false)? {
            Ok(finished) => result::finished(name, &finished, self.check),
            Err(SandboxError::Failed(finished)) => result::finished(name, &finished, self.check),
            Err(e) => result::run_error(name, &e),
        };
        Ok(outcome.value.to_string())
    }
}

impl Executor {
    /// The checked call, or the refusal recorded and raised.
    fn invocation(&self, py: Python<'_>, name: &str, params: &str) -> PyResult<Invocation> {
        self.invocation_of(name, params)
            .map_err(|e| errors::run(py, &e))
    }

    fn invocation_of(&self, name: &str, params: &str) -> Result<Invocation, SandboxError> {
        let args = match serde_json::from_str::<serde_json::Value>(params) {
            Ok(serde_json::Value::Object(map)) => agentguard_mcp::schema::arguments(Some(&map)),
            // The Python layer always sends an object; anything else is refused as one arg.
            _ => vec![(
                "params".to_owned(),
                agentguard_policy::Arg::Other("not a JSON object"),
            )],
        };
        self.sandbox.invoke(name, &args)
    }

    /// Awaits the run with the thread detached; on a signal or a cancel, kills and records.
    fn await_run(
        &self,
        py: Python<'_>,
        name: &str,
        invocation: &Invocation,
        cancel: Option<Py<CancelToken>>,
        observe: bool,
    ) -> PyResult<Result<Finished, SandboxError>> {
        let runtime = crate::runtime(py)?;
        let identity = self.sandbox.identity();
        let token = cancel.map(|t| Arc::clone(&t.get().cancelled));
        let stopped = py.detach(|| {
            runtime.block_on(async {
                let stop = {
                    let options = RunOptions {
                        observe,
                        ..RunOptions::default()
                    };
                    let run = self.sandbox.run(invocation, &identity, options);
                    tokio::pin!(run);
                    let mut poll = tokio::time::interval(SIGNAL_POLL);
                    loop {
                        tokio::select! {
                            outcome = &mut run => return Ok(outcome),
                            _ = poll.tick() => {
                                if let Some(stop) = stop_requested(token.as_deref()) {
                                    break stop;
                                }
                            }
                        }
                    }
                };
                // The run's future is dropped: its proxy is stopped and its folder removed.
                self.stop(name, &identity, &stop).await;
                Err(stop)
            })
        });
        match stopped {
            Ok(outcome) => Ok(outcome),
            Err(Stop::Signal(err)) => Err(err),
            Err(Stop::Cancelled) => Err(errors::raise(
                py,
                "Cancelled",
                format!(
                    "{name}: cancelled; killed and removed container {}",
                    identity.name
                ),
                "cancelled",
            )),
        }
    }

    async fn stop(&self, name: &str, identity: &RunIdentity, stop: &Stop) {
        self.sandbox.kill_by_name(&identity.name).await;
        let signal = match stop {
            Stop::Signal(_) => Some("SIGINT"),
            Stop::Cancelled => None,
        };
        let reason = match stop {
            Stop::Signal(_) => "interrupted",
            Stop::Cancelled => "cancelled",
        };
        // The stop is the run's last event; a log that cannot take it is reported, not lost
        // silently (the interrupt is raised either way).
        if let Err(e) = self
            .sandbox
            .executor()
            .record_stopped(name, &identity.name, reason, signal)
        {
            eprintln!("agentguard: recording the stopped run failed: {e}");
        }
    }
}

/// A stop asked for by a signal handler or by the token, looked at with the thread attached.
fn stop_requested(token: Option<&AtomicBool>) -> Option<Stop> {
    if token.is_some_and(|t| t.load(Ordering::SeqCst)) {
        return Some(Stop::Cancelled);
    }
    Python::attach(|py| py.check_signals())
        .err()
        .map(Stop::Signal)
}

/// The result's fields for the Python `RunResult` (output lossily decoded, as `run --json`).
fn result<'py>(py: Python<'py>, finished: &Finished) -> PyResult<Bound<'py, PyDict>> {
    let r = &finished.result;
    let out = PyDict::new(py);
    out.set_item("command", &r.command)?;
    out.set_item("status", r.status.as_str())?;
    out.set_item("exit_code", r.exit_code)?;
    out.set_item("stdout", String::from_utf8_lossy(&r.stdout))?;
    out.set_item("stderr", String::from_utf8_lossy(&r.stderr))?;
    out.set_item("stdout_bytes", PyBytes::new(py, &r.stdout))?;
    out.set_item("stderr_bytes", PyBytes::new(py, &r.stderr))?;
    out.set_item("truncated", r.truncated)?;
    out.set_item("duration_ms", r.duration.as_millis() as u64)?;
    out.set_item("container", &r.container)?;
    let egress = finished
        .egress
        .as_ref()
        .map(|counts| counts.to_json().to_string());
    out.set_item("egress", egress)?;
    let params = agentguard_audit::params_json(&finished.params).to_string();
    out.set_item("params", params)?;
    Ok(out)
}

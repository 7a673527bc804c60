//! The `container_run` event of each run: its outcome, and what proves what ran (the argv,
//! the image ID the engine ran, the config's digest, the invoker); and the event of a run
//! stopped before it concluded. The executor records them before it returns.

use agentguard_audit::{Decision, Event, error_chain};
use agentguard_policy::Value;

use crate::error::RunError;
use crate::result::RunResult;
use crate::spec::ContainerSpec;

/// What a `container_run` event says about one run besides its outcome.
#[derive(Default)]
pub(crate) struct Ran<'a> {
    /// The allowlisted name.
    pub(crate) name: &'a str,
    /// Its checked param values.
    pub(crate) params: &'a [(String, Value)],
    /// The argv placed in the container, once the run reached the engine.
    pub(crate) argv: Option<&'a [String]>,
    /// The image ID the engine ran, once read.
    pub(crate) image_id: Option<&'a str>,
    /// The front end's client (`invoker.client`).
    pub(crate) client: Option<&'a str>,
    /// The config's digest, when the executor was given it.
    pub(crate) config_sha256: Option<&'a str>,
    /// The container's name, once the run reached the engine (ties an error to the run's
    /// isolation receipt).
    pub(crate) container: Option<&'a str>,
}

impl Ran<'_> {
    /// A `container_run` event of this run with `decision` and `reason`, and what proves it.
    fn event(&self, spec: &ContainerSpec, decision: Decision, reason: &str) -> Event {
        let mut event = Event::container_run(decision, reason, self.name, spec.image())
            .provenance(self.config_sha256, self.client);
        if let Some(argv) = self.argv {
            event = event.argv(argv);
        }
        if let Some(container) = self.container {
            event = event.data("container", container);
        }
        if let Some(id) = self.image_id {
            event = event.data("image_id", crate::image::recorded_id(id));
        }
        event
    }
}

/// The `container_run` event of a run of `spec` that ended with `outcome`.
pub(crate) fn container_run(
    spec: &ContainerSpec,
    what: &Ran<'_>,
    outcome: Result<&RunResult, &RunError>,
) -> Event {
    // Accepted with `accept_weakened = ["limits"]`: the event says the limits did not apply.
    let weakened = spec.unenforced_limits().is_some();
    let params = what.params;
    let ran = |r: &RunResult, reason: &str| {
        let mut event = what.event(spec, Decision::Allow, reason);
        if weakened {
            event = event.data("weakened", vec!["limits"]);
        }
        event
            .params(params)
            .data("run_status", r.status.as_str())
            .data("exit_code", r.exit_code)
            .data("duration_ms", r.duration.as_millis() as u64)
            .data("truncated", r.truncated)
            .data("container", r.container.as_str())
    };
    match outcome {
        Ok(r) => ran(r, r.status.as_str()),
        Err(RunError::Failed(r)) => ran(r, "command_failed"),
        Err(RunError::Denied(d)) => what
            .event(spec, Decision::Deny, d.reason.code())
            .params(params)
            .data("message", d.message.as_str()),
        Err(e) => what
            .event(spec, Decision::Error, e.reason())
            .params(params)
            .data("message", error_chain(e)),
    }
}

/// The event of a run in `container` its caller stopped before it concluded (`reason`: the
/// stop's code; `signal`: the signal's name when there was one).
pub(crate) fn stopped(
    spec: &ContainerSpec,
    what: &Ran<'_>,
    container: &str,
    reason: &str,
    signal: Option<&str>,
) -> Event {
    let mut event = what
        .event(spec, Decision::Error, reason)
        .data("container", container);
    if let Some(signal) = signal {
        event = event.data("signal", signal);
    }
    event
}

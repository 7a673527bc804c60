//! A call as the audit log records it: who called, how the call concluded, and its one
//! `mcp_call` event. The client's own text (its name and version, the request id) is kept
//! [`capped`], so no client can make its event too long for a line.

use agentguard_audit::{AuditSink, Event, capped};
use agentguard_policy::Value;

use crate::result::Outcome;

/// Who called, for the audit log.
pub(crate) struct Caller {
    pub(crate) client: String,
    pub(crate) request_id: String,
}

/// How a call ended, before it is recorded: the outcome, the container when one was
/// started, and the params' checked values when there were any.
pub(crate) struct Concluded {
    pub(crate) outcome: Outcome,
    pub(crate) container: Option<String>,
    pub(crate) params: Vec<(String, Value)>,
}

impl Concluded {
    /// A call that started no container.
    pub(crate) fn new(outcome: Outcome) -> Concluded {
        Concluded {
            outcome,
            container: None,
            params: Vec::new(),
        }
    }
}

/// One `mcp_call` event for a concluded call in `sink`, then its outcome. The client's own
/// text (its name and version, the request id) is kept [`capped`]; an event that still cannot
/// be recorded is an error, and the caller withholds the result.
pub(crate) fn record(
    sink: Option<&dyn AuditSink>,
    tool: &str,
    caller: &Caller,
    concluded: Concluded,
) -> Result<Outcome, agentguard_audit::Error> {
    let Concluded {
        outcome,
        container,
        params,
    } = concluded;
    let Some(sink) = sink else {
        return Ok(outcome);
    };
    let mut event = Event::mcp_call(outcome.decision, &outcome.reason, tool, &caller.client)
        .data("request_id", capped(&caller.request_id).into_owned())
        .params(&params);
    if let Some(container) = container {
        event = event.data("container", container);
    }
    if let Some((status, exit_code)) = outcome.ran {
        event = event
            .data("run_status", status.as_str())
            .data("exit_code", exit_code);
    }
    if let Some(ms) = outcome.duration_ms {
        event = event.data("duration_ms", ms);
    }
    // A refusal or an error says why in its own event too (`invalid_arguments` names the
    // param, the rule and the value), cut as a client's text is.
    if outcome.decision != agentguard_audit::Decision::Allow
        && let Some(message) = outcome.value["message"].as_str()
    {
        event = event.data("message", capped(message).into_owned());
    }
    sink.record(event)?;
    Ok(outcome)
}

//! A call as the audit log records it: who called, how the call concluded, and its one
//! `mcp_call` event. The client's own text (its name and version, the request id) is kept
//! [`capped`], so no client can make its event too long for a line.

use agentguard_audit::{Decision, Event, capped};

use crate::result::Outcome;
use crate::server::McpServer;

/// Who called, for the audit log.
pub(crate) struct Caller {
    pub(crate) client: String,
    pub(crate) request_id: String,
}

/// How a call ended, before it is recorded: the decision, the outcome, and the container
/// when one was started.
pub(crate) struct Concluded {
    decision: Decision,
    outcome: Outcome,
    container: Option<String>,
}

impl Concluded {
    pub(crate) fn new(
        decision: Decision,
        outcome: Outcome,
        container: Option<String>,
    ) -> Concluded {
        Concluded {
            decision,
            outcome,
            container,
        }
    }
}

impl McpServer {
    /// One `mcp_call` event for a concluded call, then its outcome. The client's own text
    /// (its name and version, the request id) is kept [`capped`]; an event that still cannot
    /// be recorded is an error, and the caller withholds the result.
    pub(crate) fn record(
        &self,
        tool: &str,
        caller: &Caller,
        concluded: Concluded,
    ) -> Result<Outcome, agentguard_audit::Error> {
        let Concluded {
            decision,
            outcome,
            container,
        } = concluded;
        let Some(sink) = &self.inner.audit else {
            return Ok(outcome);
        };
        let value = &outcome.value;
        let mut event = Event::mcp_call(decision, outcome.reason(), tool, &caller.client)
            .data("request_id", capped(&caller.request_id).into_owned());
        if let Some(container) = container {
            event = event.data("container", container);
        }
        if let Some(status) = value["status"]
            .as_str()
            .filter(|s| *s != "denied" && *s != "error" && *s != "fetched")
        {
            event = event.data("run_status", status);
        }
        if !value["exit_code"].is_null() || value.get("exit_code").is_some() {
            event = event.data("exit_code", value["exit_code"].clone());
        }
        if let Some(ms) = value["duration_ms"].as_u64() {
            event = event.data("duration_ms", ms);
        }
        sink.record(event)?;
        Ok(outcome)
    }
}

//! The result of a tool call, built once from typed values: the decision, the reason code, and
//! for a run that happened its status, exit code and duration; then its one JSON object (the
//! same as `structuredContent` and as the only text block) and whether it is an error for the
//! host. The audit event reads the typed values, never the JSON. Status and reason codes are
//! the CLI's (`run --json` statuses, the container, policy and netpin reason codes), plus the
//! server's own: `arguments_not_accepted`, `busy`, `cancelled`, `shutting_down`.

use agentguard_audit::{Decision, error_chain};
use agentguard_container::RunStatus;
use agentguard_netpin::{FetchError, Response};
use agentguard_sandbox::{Error as SandboxError, Finished};
use serde_json::{Value, json};

use crate::present::{head_tail, sanitize};

/// A tool call's result, before it becomes a `CallToolResult`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Allowed (it ran, or fetched), denied by policy, or an error.
    pub decision: Decision,
    /// The reason code (`ok`, `command_failed`, `timed_out`, `invalid_arguments`, ...).
    pub reason: String,
    /// For a run that happened: how it ended and its exit code.
    pub ran: Option<(RunStatus, Option<i32>)>,
    /// How long the run or the fetch took.
    pub duration_ms: Option<u64>,
    /// The result object.
    pub value: Value,
    /// True for a refusal, a timeout, an output limit, an engine error, and a non-zero exit
    /// only when `check` is set.
    pub is_error: bool,
}

/// The result of a run that happened: its output as presented, its status, its counts.
pub fn finished(tool: &str, finished: &Finished, check: bool) -> Outcome {
    let r = &finished.result;
    let (stdout, stdout_cut) = head_tail(&r.stdout);
    let (stderr, stderr_cut) = head_tail(&r.stderr);
    let exited = r.status == agentguard_container::RunStatus::Exited;
    let reason = match (exited, r.success()) {
        (true, true) => "ok",
        (true, false) => "command_failed",
        (false, _) => r.status.as_str(),
    };
    let egress = finished.egress.clone().unwrap_or_default();
    let duration_ms = r.duration.as_millis() as u64;
    Outcome {
        decision: Decision::Allow,
        reason: reason.to_owned(),
        ran: Some((r.status, r.exit_code)),
        duration_ms: Some(duration_ms),
        value: json!({
            "tool": tool,
            "status": r.status.as_str(),
            "reason": reason,
            "exit_code": r.exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "truncated": r.truncated || stdout_cut || stderr_cut,
            "stdout_bytes": r.stdout.len(),
            "stderr_bytes": r.stderr.len(),
            "duration_ms": duration_ms,
            "container": r.container,
            "egress": egress.to_json(),
        }),
        is_error: !exited || (check && !r.success()),
    }
}

/// The result of a run that did not happen, or did not finish.
pub fn run_error(tool: &str, error: &SandboxError) -> Outcome {
    let retryable = matches!(error, SandboxError::Run(e) if e.is_retryable());
    refused(
        tool,
        if error.is_denial() {
            Decision::Deny
        } else {
            Decision::Error
        },
        error.reason(),
        &error_chain(error),
        retryable,
    )
}

/// A refusal (`Decision::Deny`, status `denied`) or failure (status `error`) with a stable
/// `reason`, a factual `message` and whether retrying the same call could give another
/// answer.
pub fn refused(
    tool: &str,
    decision: Decision,
    reason: &str,
    message: &str,
    retryable: bool,
) -> Outcome {
    let status = match decision {
        Decision::Deny => "denied",
        _ => "error",
    };
    Outcome {
        decision,
        reason: reason.to_owned(),
        ran: None,
        duration_ms: None,
        value: json!({
            "tool": tool,
            "status": status,
            "reason": reason,
            "message": sanitize(message),
            "retryable": retryable,
        }),
        is_error: true,
    }
}

/// Arguments given to a tool that takes none (or other than it takes).
pub fn arguments_not_accepted(tool: &str, takes: &str) -> Outcome {
    refused(
        tool,
        Decision::Deny,
        "arguments_not_accepted",
        &format!(
            "Policy decision: the tool {tool} takes {takes}; its command line is fixed by the operator's allowlist, and a call with other arguments is refused the same way."
        ),
        false,
    )
}

/// A fetch that got an answer (any status but a redirect, which netpin refuses).
pub fn fetched(response: &Response, duration_ms: u64) -> Outcome {
    let (body, cut) = head_tail(&response.body);
    let content_type = response
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| sanitize(v));
    Outcome {
        decision: Decision::Allow,
        reason: "ok".to_owned(),
        ran: None,
        duration_ms: Some(duration_ms),
        value: json!({
            "tool": crate::tools::FETCH_TOOL,
            "status": "fetched",
            "reason": "ok",
            "url": response.url,
            "http_status": response.status,
            "content_type": content_type,
            "body": body,
            "truncated": cut,
            "bytes": response.body.len(),
            "duration_ms": duration_ms,
        }),
        is_error: false,
    }
}

/// A fetch refused by policy or failed on the network.
pub fn fetch_error(error: &FetchError) -> Outcome {
    let (decision, retryable) = if error.is_refusal() {
        (Decision::Deny, false)
    } else {
        (Decision::Error, true)
    };
    refused(
        crate::tools::FETCH_TOOL,
        decision,
        error.reason(),
        &error_chain(error),
        retryable,
    )
}

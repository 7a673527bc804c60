//! How a run ended, for `agentguard run` on any target: the result printed (one JSON object
//! with `--json`) and the exit code of its status.

use agentguard_container::RunStatus;
use agentguard_sandbox::Finished;
use serde_json::Value;

use crate::exit;
use crate::output;

/// Prints the result (`--json`: [`Finished::to_json`], with `egress` replaced when the caller
/// gives its own, as a cluster run does) and returns the exit code of how the run ended;
/// `unit` names what was killed (`container`, `Job`).
pub(crate) fn report(
    finished: &Finished,
    egress: Option<Value>,
    json: bool,
    unit: &str,
) -> anyhow::Result<u8> {
    let result = &finished.result;
    if json {
        let mut value = finished.to_json();
        if let Some(egress) = egress {
            value["egress"] = egress;
        }
        output::write_lines([value.to_string()])?;
    }
    let code = match result.status {
        RunStatus::Exited => {
            u8::try_from(result.exit_code.unwrap_or(i32::from(exit::ERROR))).unwrap_or(exit::ERROR)
        }
        RunStatus::TimedOut => {
            crate::output::note(&format!(
                "agentguard: {} timed out; {unit} {} killed and removed",
                result.command, result.container
            ));
            exit::TIMEOUT
        }
        RunStatus::OutputLimit => {
            crate::output::note(&format!(
                "agentguard: {} exceeded the output limit; output truncated, {unit} {} killed and removed",
                result.command, result.container
            ));
            exit::OUTPUT_LIMIT
        }
        RunStatus::Killed if result.oom_killed => {
            crate::output::note(&format!(
                "agentguard: {} was killed for exceeding its memory limit (the engine reported OOMKilled)",
                result.command
            ));
            exit::KILLED
        }
        RunStatus::Killed => {
            crate::output::note(&format!(
                "agentguard: {} was killed by SIGKILL, not by agentguard; the engine does not say why (the memory limit, or the command killing the container's init)",
                result.command
            ));
            exit::KILLED
        }
    };
    Ok(code)
}

/// The words before a refusal's message: the reason code once, here unless the message
/// already names it (a policy denial says `denied by policy (reason)` itself).
pub(crate) fn refusal_context(name: &str, reason: &str, message: &str) -> String {
    if message.contains(&format!("({reason})")) {
        format!("agentguard run {name}")
    } else {
        format!("agentguard run {name} ({reason})")
    }
}

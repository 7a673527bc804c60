//! How a run ended, for `agentguard run` on any target: the result printed (one JSON object
//! with `--json`) and the exit code of its status.

use agentguard_container::{RunResult, RunStatus};
use serde_json::{Value, json};

use crate::exit;
use crate::output;

/// Prints the result (`--json`: one object, with the checked `params` and `egress` as given)
/// and returns the exit code of how the run ended; `unit` names what was killed
/// (`container`, `Job`).
pub(crate) fn report(
    result: &RunResult,
    params: &[(String, agentguard_policy::Value)],
    egress: Value,
    json: bool,
    unit: &str,
) -> anyhow::Result<u8> {
    if json {
        let value = json!({
            "command": result.command,
            "params": agentguard_audit::params_json(params),
            "status": result.status.as_str(),
            "exit_code": result.exit_code,
            "stdout": String::from_utf8_lossy(&result.stdout),
            "stderr": String::from_utf8_lossy(&result.stderr),
            "truncated": result.truncated,
            "duration_ms": result.duration.as_millis() as u64,
            "container": result.container,
            "egress": egress,
        });
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

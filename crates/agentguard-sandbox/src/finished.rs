//! What a run produced, the one report every front end presents: the container's result,
//! for an egress run its proxy's counts, and the checked params. `run --json` prints
//! [`Finished::to_json`]; MCP cuts its output to head and tail; Python makes its `RunResult`.

use agentguard_container::RunResult;
use agentguard_policy::Value;

use crate::count::EgressCounts;

/// What a run produced: the container's result, and for an egress run its proxy's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The container's result.
    pub result: RunResult,
    /// The CONNECT requests the run's proxy allowed and refused (`None` for `network =
    /// "none"`).
    pub egress: Option<EgressCounts>,
    /// The checked params the command ran with.
    pub params: Vec<(String, Value)>,
}

impl Finished {
    /// The result as one JSON object (`run --json`, on any target): the whole output (as
    /// UTF-8, lossily), the checked params as the audit log records them, and the egress
    /// counts (all zero for `network = "none"`).
    pub fn to_json(&self) -> serde_json::Value {
        let r = &self.result;
        serde_json::json!({
            "command": r.command,
            "params": agentguard_audit::params_json(&self.params),
            "status": r.status.as_str(),
            "exit_code": r.exit_code,
            "stdout": String::from_utf8_lossy(&r.stdout),
            "stderr": String::from_utf8_lossy(&r.stderr),
            "truncated": r.truncated,
            "duration_ms": r.duration.as_millis() as u64,
            "container": r.container,
            "egress": self.egress.clone().unwrap_or_default().to_json(),
        })
    }
}

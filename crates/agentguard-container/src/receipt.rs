//! The isolation receipt a run's relay writes as the first line of stderr before the command
//! starts (`agentguard-relay`'s `receipt.rs` says what each check proves): read from the
//! captured line, a failed check refuses the run (`isolation_failed`, the command never ran),
//! and each receipt is recorded as an `isolation_receipt` event before the run's
//! `container_run`.

use std::collections::BTreeMap;

use agentguard_audit::{Decision, Event, Kind};
use serde_json::Value;

/// One run's receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// Every check held.
    pub passed: bool,
    /// The checks that failed, by name.
    pub failed: Vec<String>,
    /// Each check and what was seen.
    pub checks: BTreeMap<String, String>,
    /// How long the checks took inside the container, in microseconds.
    pub micros: u64,
}

impl Receipt {
    /// The receipt in `line` (the JSON after the mark), or why there is none: no line at all,
    /// or one that is not a receipt. Either way the run is not proved isolated.
    pub fn parse(line: Option<&[u8]>) -> Result<Receipt, String> {
        let line = line.ok_or("the relay wrote no isolation receipt")?;
        let value: Value = serde_json::from_slice(line)
            .map_err(|e| format!("the isolation receipt is not JSON: {e}"))?;
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array()?
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let checks: Option<BTreeMap<String, String>> = value["checks"].as_object().and_then(|m| {
            m.iter()
                .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        });
        let (Some(decision), Some(failed), Some(checks), Some(micros)) = (
            value["decision"].as_str(),
            strings(&value["failed"]),
            checks,
            value["micros"].as_u64(),
        ) else {
            return Err("the isolation receipt lacks decision, failed, checks or micros".into());
        };
        let passed = decision == "allow" && failed.is_empty() && !checks.is_empty();
        Ok(Receipt {
            passed,
            failed,
            checks,
            micros,
        })
    }

    /// A whole log's receipt line (after the mark, without the newline) and the log after it,
    /// when the log begins with one: a cluster pod's log, where nothing can come before the
    /// relay's first write. Anything else has no receipt, whatever it holds later.
    pub fn leading(log: &[u8]) -> (Option<&[u8]>, &[u8]) {
        let line = log
            .strip_prefix(crate::capture::RECEIPT_MARK.as_bytes())
            .and_then(|rest| {
                let end = rest.iter().position(|b| *b == b'\n')?;
                Some((&rest[..end], &rest[end + 1..]))
            });
        match line {
            Some((line, rest)) => (Some(line), rest),
            None => (None, log),
        }
    }

    /// What failed, and what was seen for it: `interfaces: lo,eth0; routes: ...`.
    pub fn failures(&self) -> String {
        self.failed
            .iter()
            .map(|name| {
                let seen = self.checks.get(name).map_or("?", String::as_str);
                format!("{name}: {seen}")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The `isolation_receipt` event of the run `container` of command `name`.
    pub fn event(&self, name: &str, container: &str) -> Event {
        let (decision, reason) = if self.passed {
            (Decision::Allow, "ok")
        } else {
            (Decision::Deny, "isolation_failed")
        };
        let checks: serde_json::Map<String, Value> = self
            .checks
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(agentguard_audit::recorded_text(v))))
            .collect();
        Event::new(Kind::IsolationReceipt, decision, reason)
            .subject("command", name)
            .data("container", container)
            .data("checks", Value::Object(checks))
            .data("failed", self.failed.clone())
            .data("micros", self.micros)
    }

    /// The run's isolation receipt from the captured line (recorded whatever it says), and the
    /// refusal when a check failed or, unless the engine failed before the relay started (its own
    /// error says why), when none came.
    pub(crate) fn of(
        kind: crate::kind::EngineKind,
        captured: &crate::capture::Captured,
        exit_code: Option<i32>,
    ) -> (Option<Receipt>, Option<crate::error::RunError>) {
        match Receipt::parse(captured.receipt.as_deref()) {
            Ok(taken) if taken.passed => (Some(taken), None),
            Ok(taken) => {
                let what = taken.failures();
                (
                    Some(taken),
                    Some(crate::error::RunError::IsolationFailed { what }),
                )
            }
            Err(_)
                if captured.stop.is_none()
                    && crate::classify::engine_failed(kind, exit_code, captured) =>
            {
                (None, None)
            }
            Err(why) => {
                // What the engine or the container said instead, so the cause is not hidden.
                let said = String::from_utf8_lossy(&captured.stderr);
                let said: String = said.trim().chars().take(400).collect();
                let what = match (said.is_empty(), exit_code) {
                    (true, code) => format!("{why}; exit status {code:?}"),
                    (false, code) => format!("{why}; exit status {code:?}; stderr: {said}"),
                };
                (None, Some(crate::error::RunError::IsolationFailed { what }))
            }
        }
    }
}

#[cfg(test)]
mod tests;

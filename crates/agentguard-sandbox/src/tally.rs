//! What a run's proxy allowed, refused and observed, counted exactly as the events arrive
//! (before any merging of the audit log's events): the counts `run --json`, MCP and Python
//! report, and the refused and observed targets grouped by target and reason, so a user sees
//! what was refused without reading the log.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use agentguard_audit::{Decision, Event, Kind};

/// The most refused (or observed) targets a result lists; the rest are counted in
/// `refused_more`.
pub const MAX_LISTED_TARGETS: usize = 20;

/// One target and why, with how many requests it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetCount {
    /// `host:port` for a CONNECT, `route NAME METHOD /path` for a route request.
    pub target: String,
    /// The reason code (`domain_not_allowed`, ...; `observed` for an observed one).
    pub reason: String,
    /// How many requests.
    pub count: u64,
}

/// How many requests (CONNECTs and route requests) the run's proxy allowed and refused, and
/// which targets it refused (and, in an observe run, let through).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressCounts {
    /// Tunnels opened and route requests forwarded (observed ones included).
    pub allowed: u64,
    /// Requests refused, or that failed (a name that did not resolve, a dial that failed).
    pub denied: u64,
    /// The refused targets, most frequent first, at most [`MAX_LISTED_TARGETS`].
    pub refused: Vec<TargetCount>,
    /// How many more refused targets there were.
    pub refused_more: u64,
    /// Requests the policy would have refused, let through by an observe run.
    pub observed: u64,
    /// Their targets, most frequent first, at most [`MAX_LISTED_TARGETS`].
    pub observed_targets: Vec<TargetCount>,
}

impl EgressCounts {
    /// The `egress` object of `run --json`, MCP and Python: `allowed`, `denied`, `refused`
    /// (and `refused_more` when cut), and for an observe run `observed` and
    /// `observed_targets`.
    pub fn to_json(&self) -> serde_json::Value {
        let list = |items: &[TargetCount]| -> Vec<serde_json::Value> {
            items
                .iter()
                .map(|t| serde_json::json!({"target": t.target, "reason": t.reason, "count": t.count}))
                .collect()
        };
        let mut value = serde_json::json!({
            "allowed": self.allowed,
            "denied": self.denied,
            "refused": list(&self.refused),
        });
        if self.refused_more > 0 {
            value["refused_more"] = self.refused_more.into();
        }
        if self.observed > 0 {
            value["observed"] = self.observed.into();
            value["observed_targets"] = list(&self.observed_targets).into();
        }
        value
    }

    /// One line for a person, after the command's output: what the proxy refused, the most
    /// frequent first, and how to learn the policy (`None` when nothing was refused).
    pub fn refused_line(&self) -> Option<String> {
        if self.denied == 0 {
            return None;
        }
        let each: Vec<String> = self
            .refused
            .iter()
            .map(|t| format!("{} ({}) x{}", t.target, t.reason, t.count))
            .collect();
        let more = if self.refused_more > 0 {
            format!(" and {} more", self.refused_more)
        } else {
            String::new()
        };
        let noun = if self.denied == 1 {
            "connection"
        } else {
            "connections"
        };
        Some(format!(
            "agentguard: the proxy refused {} {noun}: {}{more}; to learn what the command needs, run it once with `agentguard run --observe` and turn the log into config lines with `agentguard policy suggest` (docs/learn.md)",
            self.denied,
            each.join(", ")
        ))
    }
}

/// The counters of one run, updated by each event the run's proxy records.
#[derive(Default)]
pub(crate) struct Tally {
    allowed: AtomicU64,
    denied: AtomicU64,
    refused: Mutex<BTreeMap<(String, String), u64>>,
    observed: Mutex<BTreeMap<String, u64>>,
}

/// The target an egress event is about, as a result lists it.
fn target_of(event: &Event) -> String {
    let text = |key: &str| {
        event
            .subject
            .get(key)
            .or_else(|| event.data.get(key))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    match event.kind {
        Kind::EgressRoute => format!(
            "route {} {} {}",
            text("route"),
            text("method"),
            text("path")
        ),
        _ => match text("target") {
            t if t.is_empty() => "(an unreadable request)".to_owned(),
            t => t,
        },
    }
}

impl Tally {
    /// Counts one allow or refusal of the run's proxy.
    pub(crate) fn count(&self, event: &Event) {
        match event.decision {
            Decision::Allow => {
                self.allowed.fetch_add(1, Ordering::Relaxed);
                if event.reason == "observed" {
                    let mut observed = self.observed.lock().unwrap_or_else(PoisonError::into_inner);
                    *observed.entry(target_of(event)).or_default() += 1;
                }
            }
            Decision::Deny | Decision::Error => {
                self.denied.fetch_add(1, Ordering::Relaxed);
                let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
                *refused
                    .entry((target_of(event), event.reason.clone()))
                    .or_default() += 1;
            }
        }
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> EgressCounts {
        let top = |mut all: Vec<TargetCount>| -> (Vec<TargetCount>, u64) {
            all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.target.cmp(&b.target)));
            let more = all.len().saturating_sub(MAX_LISTED_TARGETS) as u64;
            all.truncate(MAX_LISTED_TARGETS);
            (all, more)
        };
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let (refused, refused_more) = top(refused
            .iter()
            .map(|((target, reason), count)| TargetCount {
                target: target.clone(),
                reason: reason.clone(),
                count: *count,
            })
            .collect());
        let observed = self.observed.lock().unwrap_or_else(PoisonError::into_inner);
        let (observed_targets, _) = top(observed
            .iter()
            .map(|(target, count)| TargetCount {
                target: target.clone(),
                reason: "observed".into(),
                count: *count,
            })
            .collect());
        EgressCounts {
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            refused,
            refused_more,
            observed: observed.values().sum(),
            observed_targets,
        }
    }
}

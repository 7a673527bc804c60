//! The canary's recorded verdict, the proof every run waits for: a ConfigMap in the namespace
//! saying NetworkPolicy blocked the canary, younger than a day. The canary writes it; a run
//! reads it before anything is created.

use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::error::Result;
use crate::kubectl::Kubectl;

/// The ConfigMap holding the last verdict.
pub const RECORD: &str = "agentguard-networkpolicy-canary";
/// How long a blocked verdict lets runs go ahead.
pub const VALID: Duration = Duration::from_secs(24 * 3600);
/// What the canary saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing was reached: NetworkPolicy is enforced.
    Blocked,
    /// Something was reached: NetworkPolicy is not enforced in this namespace.
    Reached(String),
}

/// Seconds since the epoch, as the deadline and canary labels hold them.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

pub(crate) async fn record(kubectl: &Kubectl, verdict: &Verdict) -> Result<()> {
    let (result, detail) = match verdict {
        Verdict::Blocked => ("blocked", String::new()),
        Verdict::Reached(what) => ("reached", what.clone()),
    };
    let map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": RECORD, "labels": {"app.kubernetes.io/managed-by": "agentguard"}},
        "data": {"result": result, "checked_at": now().to_string(), "detail": detail},
    });
    kubectl.delete("configmaps", RECORD).await?;
    kubectl.create(&[map]).await
}

/// Why runs may not go ahead in this namespace yet, or `None` when a blocked verdict younger
/// than [`VALID`] is recorded.
pub async fn unproven(kubectl: &Kubectl) -> Result<Option<String>> {
    let Some(map) = kubectl.get("configmaps", RECORD).await? else {
        return Ok(Some("no canary verdict is recorded".into()));
    };
    let data = &map["data"];
    let checked: Option<u64> = data["checked_at"].as_str().and_then(|t| t.parse().ok());
    Ok(match (data["result"].as_str(), checked) {
        (Some("blocked"), Some(at)) if now().saturating_sub(at) <= VALID.as_secs() => None,
        (Some("blocked"), Some(at)) => Some(format!(
            "the last blocked verdict is {} h old (at most {} h count)",
            now().saturating_sub(at) / 3600,
            VALID.as_secs() / 3600
        )),
        (Some("reached"), _) => Some(format!(
            "the canary reached what NetworkPolicy should block ({})",
            data["detail"].as_str().unwrap_or_default()
        )),
        _ => Some(format!("the recorded verdict is not readable: {data}")),
    })
}

//! The NetworkPolicy canary: a run, compiled like any sandbox run with the deny-all policy, of
//! `agentguard k8s canary` in the proxy image, which tries to reach the Kubernetes API server
//! (the one Service every pod can reach when nothing is enforced). It must be blocked: a CNI
//! that does not enforce NetworkPolicy lets it through. `doctor` runs it and records the
//! verdict in a ConfigMap; every run refuses until a blocked verdict younger than a day is
//! recorded in its namespace.

use std::time::{Duration, SystemTime};

use agentguard_container::{ContainerSpec, RunStatus};
use agentguard_k8s::{K8sSettings, RunNetwork, RunRequest, Weakened};
use serde_json::json;

use crate::error::{Error, Result};
use crate::kubectl::Kubectl;

/// The ConfigMap holding the last verdict.
pub const RECORD: &str = "agentguard-networkpolicy-canary";
/// How long a blocked verdict lets runs go ahead.
pub const VALID: Duration = Duration::from_secs(24 * 3600);
/// The canary's command name, and its argv in the proxy image.
const NAME: &str = "networkpolicy-canary";
const ARGV: [&str; 3] = ["agentguard", "k8s", "canary"];

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

/// Runs the canary and records its verdict.
pub async fn run(
    kubectl: &Kubectl,
    settings: &K8sSettings,
    labels: &[(String, String)],
) -> Result<Verdict> {
    let Some(image) = &settings.proxy_image else {
        return Err(Error::NoCanaryImage);
    };
    let spec = ContainerSpec::builder(image.clone())
        .command(NAME, ARGV)
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| Error::Compile(agentguard_k8s::Error::Unsupported(e.to_string())))?;
    let run_id = format!(
        "agentguard-canary-{}-{}",
        std::process::id(),
        now() % 1_000_000_000
    );
    let invocation = spec
        .commands()
        .invoke(NAME, &[])
        .map_err(|e| Error::Compile(agentguard_k8s::Error::Unsupported(e.to_string())))?;
    let request = RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: &run_id,
        labels,
        network: RunNetwork::None,
        workspace_rw: false,
    };
    // The canary proves the policy, so it cannot wait for its own proof.
    let ran = match crate::run::run_unproven(kubectl, settings, &request, Weakened::ALL).await? {
        Ok(ran) => ran,
        Err(refused) => return Err(Error::Canary(refused.to_string())),
    };
    let result = ran.result;
    let said = String::from_utf8_lossy(&result.stdout).trim().to_owned();
    let verdict = match (result.status, result.exit_code) {
        (RunStatus::Exited, Some(0)) => Verdict::Blocked,
        (RunStatus::Exited, Some(1)) => Verdict::Reached(said),
        (status, code) => {
            return Err(Error::Canary(format!(
                "it ended {} with exit code {code:?}: {said}",
                status.as_str()
            )));
        }
    };
    record(kubectl, &verdict).await?;
    Ok(verdict)
}

async fn record(kubectl: &Kubectl, verdict: &Verdict) -> Result<()> {
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

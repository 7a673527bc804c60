//! The NetworkPolicy canary: a run, compiled like any sandbox run with the deny-all policy, of
//! `agentguard k8s canary` in the proxy image, which tries to reach the Kubernetes API server
//! (the one Service every pod can reach when nothing is enforced). It must be blocked: a CNI
//! that does not enforce NetworkPolicy lets it through. `doctor` runs it and records the
//! verdict in a ConfigMap; every run refuses until a blocked verdict younger than a day is
//! recorded in its namespace.

use std::time::Duration;

use agentguard_container::{ContainerSpec, RunStatus};
use agentguard_k8s::{K8sSettings, RunNetwork, RunRequest, Weakened};

use crate::error::{Error, Result};
use crate::kubectl::Kubectl;
pub use crate::proof::{RECORD, VALID, Verdict, unproven};
use crate::proof::{now, record};

/// The canary's command name, and its argv in the proxy image.
const NAME: &str = "networkpolicy-canary";
const ARGV: [&str; 3] = ["agentguard", "k8s", "canary"];

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

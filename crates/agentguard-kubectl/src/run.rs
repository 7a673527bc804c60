//! One run on the cluster: check the server and what is weakened, create the run's egress
//! proxy (for `network = "egress"`), wait for its ClusterIP and follow its pod's log of
//! decisions into the run's audit sink, create the NetworkPolicy and then the Job, watch its
//! pod, capture its log under the cap, take the isolation receipt off its head (a failed or
//! missing one refuses the run), read how it ended, delete everything, and take the
//! proxy's last decisions before the result is reported. A run whose future is dropped (cancellation, SIGTERM) starts the deletion as
//! it goes; `agentguard gc` removes what a SIGKILLed run left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentguard_audit::AuditSink;
use agentguard_container::{Receipt, RunResult, RunStatus};
use agentguard_k8s::{
    K8sSettings, Manifests, RunNetwork, RunRequest, Weakened, compile, proxy_name,
};

use crate::error::{Error, Result};
use crate::kubectl::Kubectl;
use crate::pod::{Ended, Watched, watch};
use crate::proxy_log::{DRAIN, Follower, ProxyStream};

/// How long the run's egress proxy may take to get its ClusterIP and a ready replica.
const PROXY_READY: Duration = Duration::from_secs(60);
/// How often the proxy's objects are read while waiting.
const PROXY_POLL: Duration = Duration::from_millis(250);
/// The exit code reported for an OOM kill (128 + SIGKILL), as the engines report it.
const OOM_EXIT: i32 = 137;

/// What the run did, and what the cluster could not keep.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The result, as a local engine's run reports it.
    pub result: RunResult,
    /// The seed defaults no Pod field kept (accepted by the operator, or there would be no run).
    pub weakened: Vec<Weakened>,
    /// For an egress run given a sink: how its proxy's stream of decisions came back.
    pub proxy: Option<ProxyStream>,
    /// The run container's `imageID` from the pod's status (the image the node ran).
    pub image_id: Option<String>,
    /// The isolation receipt the relay took inside the pod before the command started;
    /// `None` only for a run whose deadline passed before its pod wrote anything (the command
    /// never started: the timeout is how it ended).
    pub receipt: Option<Receipt>,
}

/// A refusal before anything is created: a seed default the cluster cannot keep that the
/// operator did not accept.
#[derive(Debug, thiserror::Error)]
#[error(
    "on Kubernetes `{}` is weakened: {}; add \"{}\" to [kubernetes] accept_weakened to run anyway. Nothing was created.",
    .0.name(), .0.why(), .0.name()
)]
pub struct NotAccepted(pub Weakened);

/// Runs `request` on the cluster, once the namespace's NetworkPolicy canary is recorded as
/// blocked (see [`crate::canary`]). The decisions of an egress run's proxy are appended to
/// `egress` as they arrive, each marked with its pod, and closed by an `egress_stream` event,
/// all before this returns.
pub async fn run(
    kubectl: &Kubectl,
    settings: &K8sSettings,
    request: &RunRequest<'_>,
    accepted: &[Weakened],
    egress: Option<Arc<dyn AuditSink>>,
) -> Result<std::result::Result<Ran, NotAccepted>> {
    run_checked(kubectl, settings, request, accepted, egress, true).await
}

/// [`run`] without the canary's proof: for the canary itself.
pub(crate) async fn run_unproven(
    kubectl: &Kubectl,
    settings: &K8sSettings,
    request: &RunRequest<'_>,
    accepted: &[Weakened],
) -> Result<std::result::Result<Ran, NotAccepted>> {
    run_checked(kubectl, settings, request, accepted, None, false).await
}

async fn run_checked(
    kubectl: &Kubectl,
    settings: &K8sSettings,
    request: &RunRequest<'_>,
    accepted: &[Weakened],
    egress: Option<Arc<dyn AuditSink>>,
    proven: bool,
) -> Result<std::result::Result<Ran, NotAccepted>> {
    let started = Instant::now();
    let manifests = compile(request, settings)?;
    if let Some(refused) = manifests.weakened.iter().find(|w| !accepted.contains(w)) {
        return Ok(Err(NotAccepted(*refused)));
    }
    kubectl.check_server().await?;
    if proven && let Some(why) = crate::proof::unproven(kubectl).await? {
        return Err(Error::Unproven {
            namespace: kubectl.namespace().to_owned(),
            why,
        });
    }
    let cleanup = Cleanup {
        kubectl,
        run: request.run_id,
        armed: true,
    };
    let mut follower = None;
    let outcome = create_and_watch(
        kubectl,
        settings,
        request,
        manifests.clone(),
        started,
        egress
            .as_ref()
            .map(|sink| (Arc::clone(sink), &mut follower)),
    )
    .await;
    // Deleting the proxy stops it, and a stopping proxy writes its end line.
    cleanup.now().await;
    let proxy = match (follower, &egress) {
        (Some(follower), Some(sink)) => Some(follower.finish(DRAIN, sink.as_ref()).await?),
        _ => None,
    };
    let watched = outcome?;
    let (receipt, logs) = taken(&watched)?;
    let oom_killed =
        matches!(&watched.ended, Ended::Exited { reason, .. } if reason == "OOMKilled");
    let (status, exit_code) = match &watched.ended {
        Ended::Exited { code, reason } if reason == "OOMKilled" => (
            RunStatus::Killed,
            Some(*code).filter(|c| *c != 0).or(Some(OOM_EXIT)),
        ),
        Ended::Exited { code, .. } => (RunStatus::Exited, Some(*code)),
        Ended::TimedOut => (RunStatus::TimedOut, None),
        Ended::OutputLimit => (RunStatus::OutputLimit, None),
    };
    Ok(Ok(Ran {
        result: RunResult {
            command: request.invocation.command().to_owned(),
            status,
            exit_code,
            stdout: logs,
            stderr: Vec::new(),
            truncated: watched.truncated,
            duration: started.elapsed(),
            container: request.run_id.to_owned(),
            oom_killed,
        },
        weakened: manifests.weakened,
        proxy,
        image_id: watched.image_id,
        receipt,
    }))
}

/// The receipt at the head of the pod's log and the log after it; a failed receipt, or none,
/// refuses the run (the relay never started the command), unless the deadline passed before
/// the pod wrote anything at all: then nothing ran, and the timeout is reported.
fn taken(watched: &Watched) -> Result<(Option<Receipt>, Vec<u8>)> {
    if matches!(watched.ended, Ended::TimedOut) && watched.logs.is_empty() {
        return Ok((None, Vec::new()));
    }
    let (line, rest) = Receipt::leading(&watched.logs);
    match Receipt::parse(line) {
        Ok(receipt) if receipt.passed => Ok((Some(receipt), rest.to_vec())),
        Ok(receipt) => Err(Error::IsolationFailed {
            what: receipt.failures(),
            receipt: Some(Box::new(receipt)),
        }),
        Err(why) => {
            let said = String::from_utf8_lossy(&watched.logs);
            let said: String = said.trim().chars().take(400).collect();
            let ended = match &watched.ended {
                Ended::Exited { code, reason } => format!("exited {code} ({reason})"),
                Ended::TimedOut => "timed out".into(),
                Ended::OutputLimit => "reached the output limit".into(),
            };
            Err(Error::IsolationFailed {
                what: format!("{why}; the run container {ended}; its log: {said:?}"),
                receipt: None,
            })
        }
    }
}

async fn create_and_watch(
    kubectl: &Kubectl,
    settings: &K8sSettings,
    request: &RunRequest<'_>,
    mut manifests: Manifests,
    started: Instant,
    follow: Option<(Arc<dyn AuditSink>, &mut Option<Follower>)>,
) -> Result<Watched> {
    if let (Some([policy, deployment, service]), RunNetwork::Egress(plan)) =
        (manifests.proxy.clone(), &request.network)
    {
        // One call per step: kubectl creates the rest of a List when one item is refused.
        kubectl.create(&[policy]).await?;
        kubectl.create(&[deployment, service]).await?;
        let address = proxy_address(kubectl, request.run_id).await?;
        if let Some((sink, slot)) = follow {
            *slot = Some(Follower::start(kubectl, request.run_id, sink).await?);
        }
        let mut plan = plan.clone();
        plan.proxy_address = Some(address);
        let with_address = RunRequest {
            network: RunNetwork::Egress(plan),
            ..request.clone()
        };
        manifests = compile(&with_address, settings)?;
    }
    // The policy first, and alone: kubectl goes on with the rest of a List when an item is
    // refused, and the pod must never exist without its policy.
    kubectl.create(&[manifests.network_policy.clone()]).await?;
    kubectl.create(&[manifests.job.clone()]).await?;
    let deadline = started + request.spec.timeout();
    watch(
        kubectl,
        request.run_id,
        deadline,
        request.spec.max_output_bytes(),
    )
    .await
}

/// Waits for the proxy Service's ClusterIP and a ready proxy replica.
async fn proxy_address(kubectl: &Kubectl, run: &str) -> Result<std::net::IpAddr> {
    let name = proxy_name(run);
    let until = Instant::now() + PROXY_READY;
    let not_ready = |what| Error::ProxyNotReady {
        name: name.clone(),
        seconds: PROXY_READY.as_secs(),
        what,
    };
    let address = loop {
        let service = kubectl.get("services", &name).await?.unwrap_or_default();
        if let Some(ip) = service["spec"]["clusterIP"]
            .as_str()
            .and_then(|ip| ip.parse().ok())
        {
            break ip;
        }
        if Instant::now() >= until {
            return Err(not_ready("the Service has no ClusterIP"));
        }
        tokio::time::sleep(PROXY_POLL).await;
    };
    loop {
        let deployment = kubectl
            .get("deployments.apps", &name)
            .await?
            .unwrap_or_default();
        if deployment["status"]["availableReplicas"]
            .as_u64()
            .unwrap_or(0)
            >= 1
        {
            return Ok(address);
        }
        if Instant::now() >= until {
            return Err(not_ready("no replica of the Deployment is available"));
        }
        tokio::time::sleep(PROXY_POLL).await;
    }
}

/// Deletes the run's objects: awaited on every normal end, started on drop otherwise.
struct Cleanup<'a> {
    kubectl: &'a Kubectl,
    run: &'a str,
    armed: bool,
}

impl Cleanup<'_> {
    async fn now(mut self) {
        match self.kubectl.delete_run(self.run).await {
            Ok(()) => self.armed = false,
            Err(e) => {
                tracing::error!(run = self.run, error = %e, "could not delete the run's objects; `agentguard gc` removes them")
            }
        }
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.kubectl.delete_run_detached(self.run);
        }
    }
}

//! `agentguard mcp` with `engine = "kubernetes"`: each tool call is a Job, run by the same
//! code as `agentguard run` on a cluster (`cluster.rs`): the same objects and labels, the same
//! `container_run` event with `engine`, `namespace` and the Job, the proxy pod's decisions in
//! the same log and counted in the result. The server checks each call first, as on a local
//! engine; a cancelled call or a stopped server deletes the run's objects before it answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentguard_audit::{AuditSink, Decision, Event, error_chain};
use agentguard_container::{ContainerSpec, OutputMeter, RunIdentity};
use agentguard_k8s::{RunNetwork, RunRequest};
use agentguard_kubectl::Kubectl;
use agentguard_mcp::result::{self, Outcome};
use agentguard_mcp::{RunFuture, Runner};
use agentguard_policy::Invocation;
use agentguard_sandbox::Finished;

use crate::cluster::{
    counted, egress_sink, ended_event, on_cluster, receipt_event, with_provenance,
};
use crate::config::{Cluster, RunConfig};

/// Runs checked calls as Jobs on the config's cluster.
pub(crate) struct ClusterRunner {
    kubectl: Kubectl,
    cluster: Cluster,
    spec: ContainerSpec,
    /// Each command's network on the cluster, decided at start.
    networks: BTreeMap<String, RunNetwork>,
    audit: Option<Arc<dyn AuditSink>>,
    config_sha256: String,
}

impl ClusterRunner {
    /// The runner for `config`'s cluster, recording into `audit`.
    pub(crate) fn new(
        config: &RunConfig,
        cluster: &Cluster,
        audit: Option<Arc<dyn AuditSink>>,
    ) -> anyhow::Result<ClusterRunner> {
        let mut networks = BTreeMap::new();
        for command in config.spec.commands().commands() {
            let name = command.name();
            networks.insert(name.to_owned(), config.commands.k8s_network(name)?);
        }
        Ok(ClusterRunner {
            kubectl: Kubectl::new(&cluster.kubernetes.settings),
            cluster: cluster.clone(),
            spec: config.spec.clone(),
            networks,
            audit,
            config_sha256: config.commands.config_sha256().to_owned(),
        })
    }

    /// Records `event` of the run `job` asked for by `client`, with where it went and who; the
    /// error says why it could not.
    fn record(&self, event: Event, job: &str, client: Option<&str>) -> Result<(), String> {
        let Some(sink) = &self.audit else {
            return Ok(());
        };
        let event = with_provenance(event, &self.config_sha256, client);
        sink.record(on_cluster(event, &self.cluster.kubernetes, job))
            .map(drop)
            .map_err(|error| error_chain(&error))
    }

    async fn run_job(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
    ) -> Result<Finished, Outcome> {
        let name = invocation.command();
        let network = self.networks.get(name).cloned().unwrap_or(RunNetwork::None);
        let mut labels = identity.labels.clone();
        labels.push(agentguard_kubectl::gc::host_label());
        let spec = self.spec.for_command(name);
        let request = RunRequest {
            spec: &spec,
            invocation,
            run_id: &identity.name,
            labels: &labels,
            network,
            workspace_rw: self.cluster.workspace_rw_for(&self.spec, name),
        };
        let egress = egress_sink(&request, self.audit.clone());
        let outcome = counted(
            &self.kubectl,
            &self.cluster.kubernetes,
            &request,
            egress.as_ref(),
        )
        .await;
        if let Some(Err(error)) = egress.as_ref().map(|sink| sink.flush(true)) {
            return Err(audit_failed(name, &error_chain(&error)));
        }
        if let Some(event) = receipt_event(name, &identity.name, &outcome) {
            self.record(event, &identity.name, identity.client.as_deref())
                .map_err(|why| audit_failed(name, &why))?;
        }
        let event = ended_event(name, self.spec.image(), invocation, &outcome);
        self.record(event, &identity.name, identity.client.as_deref())
            .map_err(|why| audit_failed(name, &why))?;
        match outcome {
            Ok(Ok(ran)) => Ok(Finished {
                result: ran.result,
                egress: egress.map(|sink| sink.counts()),
                params: invocation.params().to_vec(),
            }),
            Ok(Err(refused)) => Err(result::refused(
                name,
                Decision::Deny,
                "weakened_not_accepted",
                &refused.to_string(),
                false,
            )),
            Err(error) => Err(result::refused(
                name,
                Decision::Error,
                error.reason(),
                &error_chain(&error),
                false,
            )),
        }
    }
}

/// The answer when a run's audit event could not be recorded: no trace, no result.
fn audit_failed(name: &str, why: &str) -> Outcome {
    result::refused(
        name,
        Decision::Error,
        "audit_failed",
        &format!("the run's audit event could not be recorded ({why}); its result is withheld"),
        false,
    )
}

impl Runner for ClusterRunner {
    fn run<'a>(
        &'a self,
        invocation: &'a Invocation,
        identity: &'a RunIdentity,
        _meter: &'a OutputMeter,
    ) -> RunFuture<'a, Result<Finished, Outcome>> {
        // The log comes back when the Job ends: nothing to meter while it runs.
        Box::pin(self.run_job(invocation, identity))
    }

    fn kill<'a>(&'a self, container: &'a str) -> RunFuture<'a, ()> {
        Box::pin(async move {
            if let Err(error) = self.kubectl.delete_run(container).await {
                tracing::error!(run = container, error = %error, "could not delete the run's objects; `agentguard gc --config` removes them");
            }
        })
    }

    fn record_stopped(&self, name: &str, container: &str, reason: &str) -> Result<(), String> {
        let event = Event::container_run(Decision::Error, reason, name, self.spec.image());
        self.record(event, container, None)
    }
}

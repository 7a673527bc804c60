//! `agentguard run` and `agentguard gc` for a config with `engine = "kubernetes"`: one Job per
//! run through kubectl (`agentguard-kubectl`), the same exit statuses as a local engine, a
//! `container_run` audit event that names the engine, the namespace and every weakened default.
//!
//! The log (stdout and stderr together, as the kubelet keeps it) is printed when the run
//! ends, not streamed. An egress run's proxy decisions are appended to the same audit log as
//! they come back through the proxy pod's log, and counted for `--json`. SIGINT or SIGTERM drops the run, which starts the deletion of its
//! objects before agentguard exits.

use std::io::Write;
use std::sync::Arc;

use agentguard_audit::{AuditSink, Decision, Event, error_chain};
use agentguard_k8s::RunRequest;
use agentguard_kubectl::{Kubectl, NotAccepted, Ran, gc};
use agentguard_policy::{Arg, Invocation};
use agentguard_sandbox::{Finished, RunSink};
use serde_json::Value;

use crate::args::RunArgs;
use crate::config::{Cluster, KubernetesConfig, RunConfig};
use crate::exit::{self, Exit};
use crate::output;
use crate::signal::{Shutdown, Stop};

pub(crate) fn run(
    args: &RunArgs,
    params: &[(String, Arg)],
    config: &RunConfig,
    cluster: &Cluster,
) -> anyhow::Result<u8> {
    let kubernetes = &cluster.kubernetes;
    let audit = if args.dry_run {
        None
    } else {
        crate::config::runs_log(config.audit.as_ref())?
    };
    let (job, labels) = identity(&config.spec);
    let record = |event: Event| -> anyhow::Result<()> {
        if let Some(sink) = &audit {
            let event = with_provenance(event, config.commands.config_sha256(), None);
            sink.record(on_cluster(event, kubernetes, &job))?;
        }
        Ok(())
    };
    // Checked once, before kubectl is started; a refusal is recorded (exit 2, or 123 for a
    // name off the allowlist).
    let image = config.spec.image();
    let invocation = match config.spec.commands().invoke(&args.name, params) {
        Ok(invocation) => invocation,
        Err(denial) => {
            record(
                Event::container_run(Decision::Deny, denial.reason.code(), &args.name, image)
                    .data("message", denial.message.as_str()),
            )?;
            return Err(denial.into());
        }
    };
    let network = checked_network(config, &args.name)?;
    let spec = config.spec.for_command(&args.name);
    let request = RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: &job,
        labels: &labels,
        network,
        workspace_rw: cluster.workspace_rw_for(&config.spec, &args.name),
    };
    if args.dry_run {
        let manifests = agentguard_k8s::compile(&request, &kubernetes.settings)?;
        let text = agentguard_k8s::yaml::documents(&manifests.documents());
        output::write_lines([text.trim_end().to_owned()])?;
        return Ok(exit::SUCCESS);
    }
    let kubectl = Kubectl::new(&kubernetes.settings);
    let egress = egress_sink(&request, audit.clone());
    let outcome = crate::signal::runtime()?.block_on(async {
        let mut shutdown = Shutdown::install()?;
        tokio::select! {
            outcome = counted(&kubectl, kubernetes, &request, egress.as_ref()) => anyhow::Ok(Ok(outcome)),
            stop = shutdown.recv() => anyhow::Ok(Err(stop)),
        }
    })?;
    if let Some(sink) = &egress {
        sink.flush(true)?;
    }
    finish(
        args,
        &invocation,
        image,
        &job,
        outcome,
        egress.as_deref(),
        record,
    )
}

/// How a run on the cluster ended, if it was not stopped first.
pub(crate) type Outcome = agentguard_kubectl::Result<Result<Ran, NotAccepted>>;

/// For an egress run, the sink its proxy's decisions come back into (through its pod's log):
/// it tags, counts and merges them as a local run's do, into `audit`. Flush it (`all`) once
/// the run ends.
pub(crate) fn egress_sink(
    request: &RunRequest<'_>,
    audit: Option<Arc<dyn AuditSink>>,
) -> Option<Arc<RunSink>> {
    matches!(request.network, agentguard_k8s::RunNetwork::Egress(_))
        .then(|| Arc::new(RunSink::new(audit, request.run_id)))
}

/// Runs `request` on the cluster, its proxy's decisions into `egress`, which is flushed as
/// it goes. Dropping the future starts the deletion of the run's objects.
pub(crate) async fn counted(
    kubectl: &Kubectl,
    kubernetes: &KubernetesConfig,
    request: &RunRequest<'_>,
    egress: Option<&Arc<RunSink>>,
) -> Outcome {
    let accepted = &kubernetes.accept_weakened;
    let sink = egress.map(|s| Arc::clone(s) as Arc<dyn AuditSink>);
    let run = agentguard_kubectl::run(kubectl, &kubernetes.settings, request, accepted, sink);
    match egress {
        Some(counting) => counting.flushing(run).await,
        None => run.await,
    }
}

/// The `isolation_receipt` event of a run of `name` on the cluster, when its pod gave one
/// (add where it went with [`on_cluster`]): recorded before the run's `container_run`.
pub(crate) fn receipt_event(name: &str, job: &str, outcome: &Outcome) -> Option<Event> {
    let receipt = match outcome {
        Ok(Ok(ran)) => ran.receipt.as_ref(),
        Ok(Err(_)) => None,
        Err(error) => error.receipt(),
    };
    receipt.map(|receipt| receipt.event(name, job))
}

/// The `container_run` event of how a run of `name` on the cluster ended (add where it went
/// with [`on_cluster`]).
pub(crate) fn ended_event(
    name: &str,
    image: &str,
    invocation: &Invocation,
    outcome: &Outcome,
) -> Event {
    let event = match outcome {
        Ok(Ok(ran)) => {
            let event = ran_event(ran, name, image).argv(invocation.argv());
            match &ran.image_id {
                Some(id) => event.data("image_id", id.as_str()),
                None => event,
            }
        }
        Ok(Err(refused)) => {
            Event::container_run(Decision::Deny, "weakened_not_accepted", name, image)
                .data("weakened", vec![refused.0.name()])
        }
        Err(error) => Event::container_run(Decision::Error, error.reason(), name, image)
            .data("message", error_chain(error)),
    };
    event.params(invocation.params())
}

/// The one identity of a run on a cluster: a fresh Job name, and the owner labels with this
/// host's, the same for `run`, `k8s manifests` and `doctor`.
pub(crate) fn identity(
    spec: &agentguard_container::ContainerSpec,
) -> (String, Vec<(String, String)>) {
    let identity = agentguard_container::ContainerExecutor::new(spec.clone()).identity();
    let mut labels = identity.labels;
    labels.push(agentguard_kubectl::gc::host_label());
    (identity.name, labels)
}

/// The network of the allowlisted command `name` on a cluster, once the egress settings make
/// a policy, as for any run.
pub(crate) fn checked_network(
    config: &RunConfig,
    name: &str,
) -> anyhow::Result<agentguard_k8s::RunNetwork> {
    config.commands.sandbox(
        config.spec.clone(),
        None,
        agentguard_container::Streaming::Off,
    )?;
    config.commands.k8s_network(name)
}

/// Records and reports how the run ended.
fn finish(
    args: &RunArgs,
    invocation: &Invocation,
    image: &str,
    job: &str,
    outcome: Result<Outcome, Stop>,
    egress: Option<&RunSink>,
    record: impl Fn(Event) -> anyhow::Result<()>,
) -> anyhow::Result<u8> {
    match outcome {
        Err(stop) => {
            record(
                Event::container_run(Decision::Error, "interrupted", &args.name, image)
                    .params(invocation.params())
                    .data("signal", stop.name()),
            )?;
            let code = match stop {
                Stop::Interrupt => exit::INTERRUPTED,
                Stop::Terminate => exit::TERMINATED,
            };
            let message = format!("{}: deleting Job {job}", stop.name());
            Err(Exit::new(code, message).into())
        }
        Ok(outcome) => {
            if let Some(event) = receipt_event(&args.name, job, &outcome) {
                record(event)?;
            }
            record(ended_event(&args.name, image, invocation, &outcome))?;
            match outcome {
                Ok(Ok(ran)) => {
                    if !args.json {
                        let mut out = std::io::stdout().lock();
                        // A closed stdout is the reader's choice; the exit status still says how it ended.
                        let _ = out.write_all(&ran.result.stdout).and_then(|()| out.flush());
                    }
                    let counts = egress.map(RunSink::counts);
                    let egress_value = egress_json(&ran, counts.as_ref());
                    let finished = Finished {
                        result: ran.result,
                        egress: counts,
                        params: invocation.params().to_vec(),
                    };
                    crate::ended::report(&finished, Some(egress_value), args.json, "Job")
                }
                Ok(Err(refused)) => Err(refused.into()),
                Err(error) => {
                    let context = crate::ended::refusal_context(
                        &format!("{} on Kubernetes", args.name),
                        error.reason(),
                        &error.to_string(),
                    );
                    Err(anyhow::Error::new(error).context(context))
                }
            }
        }
    }
}

/// `--json`'s `egress` of an egress run: the counts, and how the proxy's stream came back
/// (`complete`, `stream_cut`, `lines_refused`, as its `egress_stream` event says), which is
/// also said on stderr when it is not complete.
fn egress_json(ran: &Ran, counts: Option<&agentguard_sandbox::EgressCounts>) -> Value {
    let Some(counts) = counts else {
        return Value::Null;
    };
    let stream = ran.proxy.as_ref().map(|proxy| {
        let event = proxy.summary.event(&proxy.pod);
        if let Some(problem) = proxy.summary.problem() {
            crate::output::note(&format!(
                "agentguard: the audit stream of egress proxy pod {}: {problem}; the audit log records it (egress_stream {})",
                proxy.pod, event.reason
            ));
        }
        event.reason
    });
    let mut value = counts.to_json();
    value["stream"] = serde_json::json!(stream);
    value
}

/// The event of a run that happened, as the container executor records one.
fn ran_event(ran: &Ran, name: &str, image: &str) -> Event {
    let r = &ran.result;
    let weakened: Vec<&str> = ran.weakened.iter().map(|w| w.name()).collect();
    Event::container_run(Decision::Allow, r.status.as_str(), name, image)
        .data("run_status", r.status.as_str())
        .data("exit_code", r.exit_code)
        .data("duration_ms", r.duration.as_millis() as u64)
        .data("truncated", r.truncated)
        .data("weakened", weakened)
}

/// `event` with who ran it under which config, when it is the run's `container_run` (the
/// receipt before it is the pod's own word, as a local run's is).
pub(crate) fn with_provenance(event: Event, config_sha256: &str, client: Option<&str>) -> Event {
    if event.kind == agentguard_audit::Kind::ContainerRun {
        event.provenance(Some(config_sha256), client)
    } else {
        event
    }
}

/// Adds where the run went: the engine, the namespace, the Job.
pub(crate) fn on_cluster(event: Event, kubernetes: &KubernetesConfig, job: &str) -> Event {
    event
        .data("engine", "kubernetes")
        .data("namespace", kubernetes.settings.namespace.as_str())
        .data("container", job)
}

/// `agentguard gc --config FILE` for a cluster: the stale runs of the namespace.
pub(crate) fn sweep(kubernetes: &KubernetesConfig, dry_run: bool) -> anyhow::Result<Vec<String>> {
    let kubectl = Kubectl::new(&kubernetes.settings);
    let verb = if dry_run { "would delete" } else { "deleted" };
    let namespace = kubectl.namespace().to_owned();
    let stale = crate::signal::runtime()?.block_on(gc::sweep(&kubectl, dry_run))?;
    if stale.is_empty() {
        return Ok(vec![format!("kubernetes ({namespace}): nothing to delete")]);
    }
    Ok(stale
        .into_iter()
        .map(|s| format!("kubernetes ({namespace}): {verb} run {} ({})", s.run, s.why))
        .collect())
}

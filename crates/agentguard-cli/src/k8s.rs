//! `agentguard k8s manifests --config FILE NAME`: the objects a run of NAME would apply on the
//! cluster, as YAML documents on stdout, for review and GitOps. The defaults Kubernetes cannot
//! keep are named on stderr, with whether the config accepts them (`[kubernetes]
//! accept_weakened`); a run refuses the ones it does not. `agentguard k8s relay PATH` writes the
//! built-in relay, for a run pod's init container (the isolation receipt).

use agentguard_k8s::{RunRequest, compile, yaml};

use crate::args::{K8sCanaryArgs, K8sCommand, K8sManifestsArgs, K8sRelayArgs};
use crate::exit::{self, Exit};
use crate::{config, output};

pub(crate) fn run(command: &K8sCommand) -> anyhow::Result<u8> {
    match command {
        K8sCommand::Manifests(args) => manifests(args),
        K8sCommand::Canary(args) => canary(args),
        K8sCommand::Relay(args) => relay(args),
    }
}

/// Writes the built-in relay (checked to be static) to the path, which must not exist.
fn relay(args: &K8sRelayArgs) -> anyhow::Result<u8> {
    let program = agentguard_sandbox::relay::RelayProgram::embedded()?;
    program.install(&args.path)?;
    Ok(exit::SUCCESS)
}

fn manifests(args: &K8sManifestsArgs) -> anyhow::Result<u8> {
    let config = config::load(&args.config)?;
    let Some(cluster) = config.cluster() else {
        return Err(Exit::usage(format!(
            "{}: `agentguard k8s manifests` needs engine = \"kubernetes\" and a [kubernetes] table",
            args.config.display()
        ))
        .into());
    };
    let kubernetes = &cluster.kubernetes;
    let params = crate::args::param_words(&args.params)?;
    let invocation = config.spec.commands().invoke(&args.name, &params)?;
    let (job, labels) = crate::cluster::identity(&config.spec);
    let network = crate::cluster::checked_network(&config, &args.name)?;
    let spec = config.spec.for_command(&args.name);
    let request = RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: &job,
        labels: &labels,
        network,
        workspace_rw: cluster.workspace_rw_for(&config.spec, &args.name),
    };
    let manifests = compile(&request, &kubernetes.settings)?;
    for weakened in &manifests.weakened {
        let verdict = if kubernetes.accept_weakened.contains(weakened) {
            "accepted by [kubernetes] accept_weakened"
        } else {
            "NOT accepted: a run is refused until [kubernetes] accept_weakened names it"
        };
        output::note(&format!(
            "agentguard: warning: on Kubernetes `{}` is weakened: {}; {verdict}",
            weakened.name(),
            weakened.why()
        ));
    }
    output::write_lines([yaml::documents(&manifests.documents())
        .trim_end()
        .to_owned()])?;
    Ok(exit::SUCCESS)
}

/// `agentguard k8s canary`: one TCP connection attempt to each target; any that connects means
/// NetworkPolicy did not block it.
fn canary(args: &K8sCanaryArgs) -> anyhow::Result<u8> {
    let mut targets = args.targets.clone();
    if targets.is_empty() {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
        match format!("{host}:{port}")
            .parse()
            .or_else(|_| format!("[{host}]:{port}").parse())
        {
            Ok(api) => targets.push(api),
            Err(_) => {
                return Err(Exit::usage(
                    "no target: give IP:PORT, or run in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT name the API server)",
                )
                .into());
            }
        }
    }
    let limit = std::time::Duration::from_secs(args.timeout);
    let lines = crate::signal::runtime()?.block_on(async {
        let mut lines = Vec::new();
        for target in &targets {
            let attempt = tokio::time::timeout(limit, tokio::net::TcpStream::connect(target));
            lines.push(match attempt.await {
                Ok(Ok(_)) => (true, format!("REACHED {target}")),
                Ok(Err(e)) => (false, format!("blocked {target} ({e})")),
                Err(_) => (
                    false,
                    format!("blocked {target} (no answer in {} s)", args.timeout),
                ),
            });
        }
        lines
    });
    let reached = lines.iter().any(|(reached, _)| *reached);
    output::write_lines(lines.into_iter().map(|(_, line)| line))?;
    Ok(if reached {
        exit::FAILURE
    } else {
        exit::SUCCESS
    })
}

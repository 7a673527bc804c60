//! The egress proxy of one run on the cluster: a Deployment running `agentguard
//! egress-proxy` with the command's allowlist, a Service in front of it, and its own
//! NetworkPolicy: in, only the run's sandbox pod on the proxy port; out, the cluster DNS and,
//! on the allowed ports, every address but the special-purpose blocks the classifier knows
//! (and the configured `allow_cidrs`). The proxy's own public-only check stays the authority:
//! a NetworkPolicy does not cover traffic to the node itself.

use agentguard_container::UserIds;
use agentguard_policy::{IpNet, special_networks};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::model::{
    EgressPlan, LABEL_PROXY, LABEL_ROLE, LABEL_RUN, RunRequest, pull_policy, restricted_container,
    restricted_pod, run_labels,
};
use crate::settings::K8sSettings;

/// The proxy's resources: small, and requests = limits like the sandbox's.
const PROXY_CPU: &str = "500m";
const PROXY_MEMORY: &str = "134217728";

/// The proxy objects' name for the run `run_id`.
pub fn proxy_name(run_id: &str) -> String {
    format!("{run_id}-proxy")
}

/// `[NetworkPolicy, Deployment, Service]` of the run's proxy.
pub(crate) fn objects(
    request: &RunRequest<'_>,
    settings: &K8sSettings,
    plan: &EgressPlan,
) -> Result<[Value; 3]> {
    let Some(image) = &settings.proxy_image else {
        return Err(Error::Unsupported(
            "network = \"egress\" on Kubernetes needs [kubernetes] proxy_image: an image with `agentguard` on its PATH, which runs the run's egress proxy".into(),
        ));
    };
    let name = proxy_name(request.run_id);
    crate::settings::dns_label("proxy name", &name)?;
    let ports: Vec<u16> = if plan.ports.is_empty() {
        vec![443]
    } else {
        plan.ports.clone()
    };
    let argv = proxy_argv(request.run_id, plan, &ports);
    let nobody = UserIds::NOBODY;
    let mut pod = restricted_pod(nobody.uid, nobody.gid);
    pod.insert("terminationGracePeriodSeconds".into(), json!(15));
    let resources = json!({"cpu": PROXY_CPU, "memory": PROXY_MEMORY});
    pod.insert(
        "containers".into(),
        json!([{
            "name": "proxy",
            "image": image,
            "imagePullPolicy": pull_policy(image),
            "command": argv,
            "ports": [{"name": "proxy", "containerPort": plan.proxy_port, "protocol": "TCP"}],
            "readinessProbe": {"tcpSocket": {"port": plan.proxy_port}, "periodSeconds": 2},
            "livenessProbe": {"tcpSocket": {"port": plan.proxy_port}, "periodSeconds": 10},
            "resources": {"requests": resources, "limits": resources},
            "securityContext": restricted_container(),
        }]),
    );
    let pod_labels =
        json!({LABEL_RUN: request.run_id, LABEL_PROXY: request.run_id, LABEL_ROLE: "egress-proxy"});
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": run_labels(request)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {LABEL_PROXY: request.run_id}},
            "template": {"metadata": {"labels": pod_labels}, "spec": Value::Object(pod)},
        },
    });
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": run_labels(request)},
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_PROXY: request.run_id},
            "ports": [{"name": "proxy", "port": plan.proxy_port, "targetPort": plan.proxy_port, "protocol": "TCP"}],
        },
    });
    Ok([
        policy(request, settings, plan, &ports, &name)?,
        deployment,
        service,
    ])
}

fn policy(
    request: &RunRequest<'_>,
    settings: &K8sSettings,
    plan: &EgressPlan,
    ports: &[u16],
    name: &str,
) -> Result<Value> {
    let (v4, v6): (Vec<IpNet>, Vec<IpNet>) = special_networks()
        .into_iter()
        .partition(|net| matches!(net, IpNet::V4(_)));
    let except = |nets: &[IpNet], all: &str| -> Vec<String> {
        nets.iter()
            .map(ToString::to_string)
            .filter(|n| n != all)
            .collect()
    };
    let mut to = vec![
        json!({"ipBlock": {"cidr": "0.0.0.0/0", "except": except(&v4, "0.0.0.0/0")}}),
        json!({"ipBlock": {"cidr": "::/0", "except": except(&v6, "::/0")}}),
    ];
    for cidr in &plan.cidrs {
        let net = agentguard_policy::parse_cidr(cidr).map_err(|e| Error::Invalid {
            field: "egress.allow_cidrs",
            value: cidr.clone(),
            why: e.to_string(),
        })?;
        to.push(json!({"ipBlock": {"cidr": net.to_string()}}));
    }
    let port_list: Vec<Value> = ports
        .iter()
        .map(|p| json!({"protocol": "TCP", "port": p}))
        .collect();
    Ok(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": run_labels(request)},
        "spec": {
            "podSelector": {"matchLabels": {LABEL_PROXY: request.run_id}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": {LABEL_RUN: request.run_id, LABEL_ROLE: "sandbox"}}}],
                "ports": [{"protocol": "TCP", "port": plan.proxy_port}],
            }],
            "egress": [
                {
                    "to": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                    }],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
                {"to": to, "ports": port_list},
            ],
        },
    }))
}

/// `agentguard egress-proxy` with the run's allowlist. `--audit-stdout`: each decision as a
/// numbered JSON line on stdout, which the executor follows through the pod's log and appends
/// to the run's own chained log (the pod has no audit file: its root is read-only, and a file
/// there would go with the pod). No `-v`: the log holds the events and nothing else.
fn proxy_argv(run_id: &str, plan: &EgressPlan, ports: &[u16]) -> Vec<String> {
    let mut argv: Vec<String> = [
        "agentguard",
        "egress-proxy",
        "--audit-stdout",
        "--bind",
        "0.0.0.0",
        "--port",
    ]
    .map(str::to_owned)
    .to_vec();
    argv.push(plan.proxy_port.to_string());
    // `--flag=VALUE`, one element each: no value can ever be read as a flag of its own.
    argv.push(format!("--run={run_id}"));
    for host in &plan.hosts {
        argv.push(format!("--allow={host}"));
    }
    for port in ports {
        argv.push(format!("--allow-port={port}"));
    }
    for cidr in &plan.cidrs {
        argv.push(format!("--allow-cidr={cidr}"));
    }
    argv
}

//! The egress proxy of one run on the cluster: a Deployment running `agentguard
//! egress-proxy` with the command's allowlist, a Service in front of it, and its own
//! NetworkPolicy: in, only the run's sandbox pod on the proxy port; out, the cluster DNS and,
//! on the allowed ports, every address but the special-purpose blocks the classifier knows
//! (and the configured `allow_cidrs`). The proxy's own public-only check stays the authority:
//! a NetworkPolicy does not cover traffic to the node itself.

use agentguard_container::UserIds;
use agentguard_policy::{IpNet, special_networks};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, KeyToPath, PodTemplateSpec, Probe, SecretVolumeSource,
    Service, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::model::{
    EgressPlan, LABEL_PROXY, LABEL_ROLE, LABEL_RUN, RunRequest, labels, literal_argv, policy_port,
    pull_policy, resources, restricted_container, restricted_pod, run_meta, selector, to_json,
};
use crate::settings::K8sSettings;

/// Where the routes' Secrets are mounted in the proxy pod, one folder per route.
pub const SECRETS_DIR: &str = "/var/run/agentguard/routes";
/// The proxy's resources: small, and requests = limits like the sandbox's.
const PROXY_CPU: &str = "500m";
const PROXY_MEMORY: &str = "134217728";

/// The proxy's metrics and health port (`--metrics`, `/healthz`): the kubelet's readiness
/// probe reads it; no NetworkPolicy rule lets a sandbox (or anything else) in on it.
pub(crate) fn metrics_port(proxy_port: u16) -> u16 {
    if proxy_port == 9901 { 9902 } else { 9901 }
}

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
    // The proxy dials each route's upstream itself.
    let mut out_ports = ports.clone();
    for route in &plan.routes {
        if !out_ports.contains(&route.upstream_port) {
            out_ports.push(route.upstream_port);
        }
    }
    let namespace = &settings.namespace;
    let deployment = Deployment {
        metadata: run_meta(request, namespace, &name),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: selector([(LABEL_PROXY, request.run_id)]),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels([
                        (LABEL_RUN, request.run_id),
                        (LABEL_PROXY, request.run_id),
                        (LABEL_ROLE, "egress-proxy"),
                    ])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod(request, plan, image, &ports)),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    };
    let service = Service {
        metadata: run_meta(request, namespace, &name),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(labels([(LABEL_PROXY, request.run_id)])),
            ports: Some(vec![ServicePort {
                name: Some("proxy".into()),
                port: i32::from(plan.proxy_port),
                target_port: Some(IntOrString::Int(i32::from(plan.proxy_port))),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    Ok([
        to_json(
            "NetworkPolicy",
            &policy(request, settings, plan, &out_ports, &name)?,
        )?,
        to_json("Deployment", &deployment)?,
        to_json("Service", &service)?,
    ])
}

/// The proxy's pod: the restricted settings as nobody, its one container, and the routes'
/// Secrets.
fn pod(
    request: &RunRequest<'_>,
    plan: &EgressPlan,
    image: &str,
    ports: &[u16],
) -> k8s_openapi::api::core::v1::PodSpec {
    let nobody = UserIds::NOBODY;
    let mut pod = restricted_pod(nobody);
    pod.termination_grace_period_seconds = Some(15);
    let (volumes, mounts) = secret_volumes(plan);
    if !volumes.is_empty() {
        // The Secret's files are the nobody group's to read (mode 0440), no one else's.
        if let Some(context) = pod.security_context.as_mut() {
            context.fs_group = Some(i64::from(nobody.gid));
        }
        pod.volumes = Some(volumes);
    }
    let metrics = metrics_port(plan.proxy_port);
    // Alive while it accepts on the proxy port; ready while `/healthz` says 200 (503 once it
    // drains, so the Service stops sending it connections).
    let liveness = Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(i32::from(plan.proxy_port)),
            host: None,
        }),
        period_seconds: Some(10),
        ..Probe::default()
    };
    let readiness = Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(i32::from(metrics)),
            scheme: Some("HTTP".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(2),
        ..Probe::default()
    };
    pod.containers = vec![Container {
        name: "proxy".into(),
        image: Some(image.to_owned()),
        image_pull_policy: Some(pull_policy(image).into()),
        command: Some(literal_argv(&proxy_argv(request.run_id, plan, ports))),
        ports: Some(vec![
            ContainerPort {
                name: Some("proxy".into()),
                container_port: i32::from(plan.proxy_port),
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("metrics".into()),
                container_port: i32::from(metrics),
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
        ]),
        readiness_probe: Some(readiness),
        liveness_probe: Some(liveness),
        resources: Some(resources(PROXY_CPU, PROXY_MEMORY)),
        security_context: Some(restricted_container()),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        ..Container::default()
    }];
    pod
}

fn policy(
    request: &RunRequest<'_>,
    settings: &K8sSettings,
    plan: &EgressPlan,
    ports: &[u16],
    name: &str,
) -> Result<NetworkPolicy> {
    let (v4, v6): (Vec<IpNet>, Vec<IpNet>) = special_networks()
        .into_iter()
        .partition(|net| matches!(net, IpNet::V4(_)));
    let block = |cidr: String, except: Option<Vec<String>>| NetworkPolicyPeer {
        ip_block: Some(IPBlock { cidr, except }),
        ..NetworkPolicyPeer::default()
    };
    let except = |nets: &[IpNet], all: &str| -> Option<Vec<String>> {
        Some(
            nets.iter()
                .map(ToString::to_string)
                .filter(|n| n != all)
                .collect(),
        )
    };
    let mut to = vec![
        block("0.0.0.0/0".into(), except(&v4, "0.0.0.0/0")),
        block("::/0".into(), except(&v6, "::/0")),
    ];
    let route_cidrs = plan.routes.iter().flat_map(|route| &route.cidrs);
    for net in plan.cidrs.iter().chain(route_cidrs) {
        to.push(block(net.to_string(), None));
    }
    let dns = NetworkPolicyPeer {
        namespace_selector: Some(selector([("kubernetes.io/metadata.name", "kube-system")])),
        pod_selector: Some(selector([("k8s-app", "kube-dns")])),
        ..NetworkPolicyPeer::default()
    };
    Ok(NetworkPolicy {
        metadata: run_meta(request, &settings.namespace, name),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector([(LABEL_PROXY, request.run_id)])),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(selector([
                        (LABEL_RUN, request.run_id),
                        (LABEL_ROLE, "sandbox"),
                    ])),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![policy_port("TCP", plan.proxy_port)]),
            }]),
            egress: Some(vec![
                NetworkPolicyEgressRule {
                    to: Some(vec![dns]),
                    ports: Some(vec![policy_port("UDP", 53), policy_port("TCP", 53)]),
                },
                NetworkPolicyEgressRule {
                    to: Some(to),
                    ports: Some(ports.iter().map(|p| policy_port("TCP", *p)).collect()),
                },
            ]),
        }),
    })
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
    argv.push(format!(
        "--metrics=0.0.0.0:{}",
        metrics_port(plan.proxy_port)
    ));
    for host in &plan.hosts {
        argv.push(format!("--allow={host}"));
    }
    for port in ports {
        argv.push(format!("--allow-port={port}"));
    }
    for cidr in &plan.cidrs {
        argv.push(format!("--allow-cidr={cidr}"));
    }
    for route in &plan.routes {
        let spec = json!({
            "name": route.name,
            "secret_file": format!("{}/{}", secret_dir(&route.name), route.secret_key),
            "route": route.table,
        });
        argv.push(format!("--route={spec}"));
    }
    argv
}

/// Where the Secret of route `name` is mounted in the proxy pod.
fn secret_dir(name: &str) -> String {
    format!("{SECRETS_DIR}/{name}")
}

/// The proxy pod's volumes of the routes' Secrets (each only its one key), and their mounts,
/// read-only. The sandbox pod has none of them.
fn secret_volumes(plan: &EgressPlan) -> (Vec<Volume>, Vec<VolumeMount>) {
    plan.routes
        .iter()
        .enumerate()
        .map(|(i, route)| {
            // By position: a route's name need not be a DNS label.
            let volume = format!("route-secret-{i}");
            (
                Volume {
                    name: volume.clone(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(route.secret_name.clone()),
                        items: Some(vec![KeyToPath {
                            key: route.secret_key.clone(),
                            path: route.secret_key.clone(),
                            mode: None,
                        }]),
                        default_mode: Some(0o440),
                        optional: None,
                    }),
                    ..Volume::default()
                },
                VolumeMount {
                    name: volume,
                    mount_path: secret_dir(&route.name),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
            )
        })
        .unzip()
}

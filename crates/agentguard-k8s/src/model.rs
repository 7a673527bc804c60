//! What a run on the cluster is made of, shared by the Job's compiler and the proxy's: the
//! labels and names, the run's request and network, the defaults no Pod field keeps, the
//! objects, and the restricted pod and container settings every pod agentguard starts has.

use std::net::IpAddr;

use std::collections::BTreeMap;

use agentguard_container::{ContainerSpec, ImagePin, UserIds};
use agentguard_policy::Invocation;
use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile,
    SecurityContext,
};
use k8s_openapi::api::networking::v1::NetworkPolicyPort;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

/// The label every object of a run carries, with the run's id.
pub const LABEL_RUN: &str = "agentguard.dev/run";
/// The label of the run's sandbox pod.
pub const LABEL_ROLE: &str = "agentguard.dev/role";
/// The label of the run's egress proxy pod.
pub const LABEL_PROXY: &str = "agentguard.dev/proxy";
/// The Job's container.
pub const CONTAINER: &str = "run";
/// The placeholder for the proxy Service's ClusterIP in printed manifests; the executor
/// creates the Service first and puts its address here.
pub const PROXY_ADDRESS_PLACEHOLDER: &str = "PROXY_CLUSTER_IP";
/// How long a finished Job stays for a last look when the executor could not delete it.
pub const TTL_AFTER_FINISHED: i32 = 300;

/// A seed default that no Pod field can keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weakened {
    /// `/tmp` is writable and executable: emptyDir has no mount options (KEP-5855 is alpha).
    TmpNoexec,
    /// No per-pod pids limit: the node's kubelet `podPidsLimit` applies (KEP-6063).
    Pids,
}

impl Weakened {
    /// The name `[kubernetes] accept_weakened` takes.
    pub fn name(self) -> &'static str {
        match self {
            Weakened::TmpNoexec => "tmp_noexec",
            Weakened::Pids => "pids",
        }
    }

    /// Every weakening, for the docs and the config's check.
    pub const ALL: &[Weakened] = &[Weakened::TmpNoexec, Weakened::Pids];

    /// What is lost and what the cluster can do about it.
    pub fn why(self) -> &'static str {
        match self {
            Weakened::TmpNoexec => {
                "/tmp is an emptyDir, which Kubernetes mounts without noexec (no mount options until VolumeBindMountOptions, alpha in 1.37); an AppArmor profile on the nodes can deny exec there"
            }
            Weakened::Pids => {
                "Kubernetes has no per-pod pids limit; the node pool's kubelet podPidsLimit must be set (128) for the limit to hold"
            }
        }
    }
}

/// How the run reaches the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunNetwork {
    /// Nothing: no DNS, a NetworkPolicy that denies all ingress and egress.
    None,
    /// Only the run's own egress proxy (a Deployment and a Service).
    Egress(EgressPlan),
}

/// The egress proxy of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPlan {
    /// Allowed host patterns.
    pub hosts: Vec<String>,
    /// Allowed ports (empty: 443 only).
    pub ports: Vec<u16>,
    /// Ranges treated as reachable although not public (parsed where the config was read).
    pub cidrs: Vec<agentguard_policy::IpNet>,
    /// The proxy's port.
    pub proxy_port: u16,
    /// The proxy Service's ClusterIP, once known (the executor's second step).
    pub proxy_address: Option<IpAddr>,
    /// The credential routes the command is granted, served by the proxy pod.
    pub routes: Vec<RouteGrant>,
}

/// A credential route on the cluster: its secret is a Kubernetes Secret mounted into the
/// proxy pod only; the sandbox gets the route's URL and nothing of the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteGrant {
    /// The route's name (a path segment: `http://PROXY:PORT/NAME/...`).
    pub name: String,
    /// The sandbox variable that holds the route's URL, if any.
    pub env: Option<String>,
    /// The Secret's name in the run's namespace.
    pub secret_name: String,
    /// The key of the Secret whose value is the credential.
    pub secret_key: String,
    /// The upstream's port, which the proxy's NetworkPolicy allows out.
    pub upstream_port: u16,
    /// Ranges the route may reach although not public (its `allow_cidrs`, parsed).
    pub cidrs: Vec<agentguard_policy::IpNet>,
    /// The route's table as the proxy reads it back (`agentguard egress-proxy --route`),
    /// without its secret.
    pub table: serde_json::Value,
}

/// One run to compile.
#[derive(Debug, Clone)]
pub struct RunRequest<'a> {
    /// The validated spec (image, allowlist, limits, environment).
    pub spec: &'a ContainerSpec,
    /// The checked call of an allowlisted command: its argv with the params' values placed.
    pub invocation: &'a Invocation,
    /// The run's id: the Job's name (a DNS label).
    pub run_id: &'a str,
    /// Owner labels (pid, start, deadline), so `gc` can find what a killed run left.
    pub labels: &'a [(String, String)],
    /// The network.
    pub network: RunNetwork,
    /// Whether the workspace claim is mounted read-write.
    pub workspace_rw: bool,
}

/// The objects of one run, and the defaults that could not be kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifests {
    /// The Job.
    pub job: Value,
    /// The sandbox pod's NetworkPolicy.
    pub network_policy: Value,
    /// For egress: the proxy's NetworkPolicy, Deployment and Service.
    pub proxy: Option<[Value; 3]>,
    /// What no Pod field keeps.
    pub weakened: Vec<Weakened>,
}

impl Manifests {
    /// Every object, in the order to apply them: the proxy's first, the Job last.
    pub fn documents(&self) -> Vec<Value> {
        let mut documents = Vec::new();
        if let Some(proxy) = &self.proxy {
            documents.extend(proxy.iter().cloned());
        }
        documents.push(self.network_policy.clone());
        documents.push(self.job.clone());
        documents
    }
}

/// The pull rule of every image a run uses (the sandbox's and the proxy's): a pinned image
/// (`name@sha256:...`, `sha256:<id>`) never changes, so it may be pulled; a tag must already
/// be on the node.
pub(crate) fn pull_policy(image: &str) -> &'static str {
    if ImagePin::of(image).is_pinned() {
        "IfNotPresent"
    } else {
        "Never"
    }
}

/// The restricted security context of every container agentguard starts.
pub(crate) fn restricted_container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        privileged: Some(false),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        proc_mount: Some("Default".into()),
        seccomp_profile: Some(runtime_default()),
        ..SecurityContext::default()
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

/// The pod-level settings every pod agentguard starts shares, running as `user`.
pub(crate) fn restricted_pod(user: UserIds) -> PodSpec {
    PodSpec {
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        host_network: Some(false),
        host_pid: Some(false),
        host_ipc: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_user: Some(i64::from(user.uid)),
            run_as_group: Some(i64::from(user.gid)),
            run_as_non_root: Some(true),
            seccomp_profile: Some(runtime_default()),
            ..PodSecurityContext::default()
        }),
        ..PodSpec::default()
    }
}

/// Labels from pairs.
pub(crate) fn labels<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The labels of every object of the run.
pub(crate) fn run_labels(request: &RunRequest<'_>) -> BTreeMap<String, String> {
    let mut out = labels([
        ("app.kubernetes.io/managed-by", "agentguard"),
        (LABEL_RUN, request.run_id),
    ]);
    for (key, value) in request.labels {
        out.insert(key.clone(), value.clone());
    }
    out
}

/// The metadata of an object of the run named `name`.
pub(crate) fn run_meta(request: &RunRequest<'_>, namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(run_labels(request)),
        ..ObjectMeta::default()
    }
}

/// A selector of exactly these labels.
pub(crate) fn selector<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: None,
    }
}

/// A TCP port (or, with `protocol`, another) of a NetworkPolicy rule.
pub(crate) fn policy_port(protocol: &str, port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.to_owned()),
        port: Some(IntOrString::Int(i32::from(port))),
        end_port: None,
    }
}

/// Requests = limits of `cpu` and `memory`.
pub(crate) fn resources(cpu: &str, memory: &str) -> ResourceRequirements {
    let both = BTreeMap::from([
        ("cpu".to_owned(), Quantity(cpu.to_owned())),
        ("memory".to_owned(), Quantity(memory.to_owned())),
    ]);
    ResourceRequirements {
        requests: Some(both.clone()),
        limits: Some(both),
        claims: None,
    }
}

/// `value` as the JSON the API takes.
pub(crate) fn to_json<T: serde::Serialize>(kind: &'static str, value: &T) -> crate::Result<Value> {
    serde_json::to_value(value).map_err(|e| crate::Error::Serialize {
        kind,
        why: e.to_string(),
    })
}

/// `text` as the kubelet passes it on: it expands `$(VAR)` and turns `$$` into `$` in a
/// container's `command`, `args` and `env` values, so every `$` is written `$$` and the
/// process gets exactly the value the validator checked (`$(PYTEST_ADDOPTS)` stays itself).
pub(crate) fn literal(text: &str) -> String {
    text.replace('$', "$$")
}

/// Every element of `argv` as [`literal`].
pub(crate) fn literal_argv(argv: &[String]) -> Vec<String> {
    argv.iter().map(|a| literal(a)).collect()
}

//! What a run on the cluster is made of, shared by the Job's compiler and the proxy's: the
//! labels and names, the run's request and network, the defaults no Pod field keeps, the
//! objects, and the restricted pod and container settings every pod agentguard starts has.

use std::net::IpAddr;

use agentguard_container::{ContainerSpec, ImagePin};
use agentguard_policy::Invocation;
use serde_json::{Value, json};

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
pub const TTL_AFTER_FINISHED: i64 = 300;

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
    /// Ranges treated as reachable although not public.
    pub cidrs: Vec<String>,
    /// The proxy's port.
    pub proxy_port: u16,
    /// The proxy Service's ClusterIP, once known (the executor's second step).
    pub proxy_address: Option<IpAddr>,
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
pub(crate) fn restricted_container() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "privileged": false,
        "runAsNonRoot": true,
        "capabilities": {"drop": ["ALL"]},
        "procMount": "Default",
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// The pod-level settings every pod agentguard starts shares.
pub(crate) fn restricted_pod(uid: u32, gid: u32) -> serde_json::Map<String, Value> {
    let base = json!({
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "hostNetwork": false,
        "hostPID": false,
        "hostIPC": false,
        "securityContext": {
            "runAsUser": uid,
            "runAsGroup": gid,
            "runAsNonRoot": true,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    });
    match base {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    }
}

/// The labels of every object of the run.
pub(crate) fn run_labels(request: &RunRequest<'_>) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert("app.kubernetes.io/managed-by".into(), json!("agentguard"));
    labels.insert(LABEL_RUN.into(), json!(request.run_id));
    for (key, value) in request.labels {
        labels.insert(key.clone(), json!(value));
    }
    Value::Object(labels)
}

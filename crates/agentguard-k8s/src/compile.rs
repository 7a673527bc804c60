//! The manifest compiler: a run of one allowlisted command -> the objects to apply. Pure: no
//! I/O, no clock, the same input gives the same bytes (golden-tested), and every object is
//! checked against the Kubernetes API types (no field the API does not know).
//!
//! Every seed default is mapped onto the Pod (DESIGN.md, KUBERNETES.md section 1): uid/gid
//! 65534 and runAsNonRoot, a read-only root, no privilege escalation, all capabilities
//! dropped, seccomp RuntimeDefault, no service account token, no service links, no host
//! namespaces, requests = limits for memory and CPU, `/tmp` a size-limited memory emptyDir,
//! `shareProcessNamespace` for `--init` (the pause container is PID 1 and reaps), no DNS and
//! a NetworkPolicy that denies everything for `network = "none"` or allows only the run's
//! proxy for `network = "egress"`, runtimeClassName for `runtime = "runsc"`, the Job's
//! deadline from `timeout`. Two defaults have no Pod field: `noexec` on `/tmp` and the pids
//! limit; they are reported as [`Weakened`], and the run refuses unless the config accepts
//! each by name.

use std::net::IpAddr;

use agentguard_container::{ContainerSpec, ImagePin};
use agentguard_policy::Invocation;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::settings::K8sSettings;

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

/// Compiles a run; `settings` must have been validated.
pub fn compile(request: &RunRequest<'_>, settings: &K8sSettings) -> Result<Manifests> {
    crate::settings::dns_label("run id", request.run_id)?;
    let spec = request.spec;
    let argv = request.invocation.argv();
    if spec.workspace().is_some() {
        return Err(Error::Invalid {
            field: "workspace",
            value: spec
                .workspace()
                .map(|(p, _)| p.display().to_string())
                .unwrap_or_default(),
            why: "a host folder cannot be mounted on a cluster's node; remove `workspace` and set [kubernetes] workspace_claim to a PersistentVolumeClaim".into(),
        });
    }
    let mut pod = restricted_pod(spec.user().uid, spec.user().gid);
    pod.insert("restartPolicy".into(), json!("Never"));
    pod.insert("shareProcessNamespace".into(), json!(true));
    pod.insert("terminationGracePeriodSeconds".into(), json!(5));
    // No DNS: a name can only be resolved by the egress proxy.
    pod.insert("dnsPolicy".into(), json!("None"));
    pod.insert("dnsConfig".into(), json!({"nameservers": ["127.0.0.1"]}));
    if let Some(class) = runtime_class(spec, settings)? {
        pod.insert("runtimeClassName".into(), json!(class));
    }
    let env = environment(spec, &request.network);
    let memory = spec.memory().bytes().to_string();
    let cpu = format!("{}m", spec.cpus().millicores());
    let resources = json!({"cpu": cpu, "memory": memory});
    let mut mounts = vec![json!({"name": "tmp", "mountPath": "/tmp"})];
    let mut volumes = vec![
        json!({"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": spec.tmpfs_size().bytes().to_string()}}),
    ];
    if let Some(claim) = &settings.workspace_claim {
        let ro = !request.workspace_rw;
        mounts.push(json!({"name": "workspace", "mountPath": agentguard_container::WORKSPACE_TARGET, "readOnly": ro}));
        volumes.push(json!({"name": "workspace", "persistentVolumeClaim": {"claimName": claim, "readOnly": ro}}));
    }
    // A pinned image never changes, so it may be pulled; a tag must already be on the node.
    let pull = match spec.image_pin() {
        ImagePin::Tag => "Never",
        ImagePin::Digest(_) | ImagePin::Id(_) => "IfNotPresent",
    };
    let mut container = json!({
        "name": CONTAINER,
        "image": spec.image(),
        "imagePullPolicy": pull,
        "command": argv,
        "env": env,
        "resources": {"requests": resources, "limits": resources},
        "securityContext": restricted_container(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    });
    if settings.workspace_claim.is_some() {
        container["workingDir"] = json!(agentguard_container::WORKSPACE_TARGET);
    }
    pod.insert("containers".into(), json!([container]));
    pod.insert("volumes".into(), json!(volumes));
    let weakened = vec![Weakened::TmpNoexec, Weakened::Pids];
    let job = job(request, settings, Value::Object(pod), &weakened);
    let network_policy = sandbox_policy(request, settings);
    let proxy = match &request.network {
        RunNetwork::Egress(plan) => Some(crate::proxy::objects(request, settings, plan)?),
        RunNetwork::None => None,
    };
    let manifests = Manifests {
        job,
        network_policy,
        proxy,
        weakened,
    };
    crate::schema::check(&manifests)?;
    Ok(manifests)
}

/// The RuntimeClass of the spec's runtime: runsc through `[kubernetes] runtime_class`, runc
/// the cluster's default; nothing else is mapped.
fn runtime_class(spec: &ContainerSpec, settings: &K8sSettings) -> Result<Option<String>> {
    let Some(runtime) = spec.runtime() else {
        return Ok(None);
    };
    match (runtime.is_gvisor(), &settings.runtime_class) {
        (true, Some(class)) => Ok(Some(class.clone())),
        (true, None) => Err(Error::Unsupported(
            "runtime = \"runsc\" needs [kubernetes] runtime_class: the RuntimeClass whose handler is runsc (for example \"gvisor\")".into(),
        )),
        (false, _) if runtime.as_str() == "runc" => Ok(None),
        (false, _) => Err(Error::Invalid {
            field: "runtime",
            value: runtime.to_string(),
            why: "on Kubernetes only runsc (through [kubernetes] runtime_class) or runc (the cluster's default) are mapped".into(),
        }),
    }
}

/// The configured environment, and for egress the proxy variables pointing at the run's proxy
/// (by its ClusterIP: the sandbox has no DNS).
fn environment(spec: &ContainerSpec, network: &RunNetwork) -> Vec<Value> {
    let mut env: Vec<Value> = spec
        .environment()
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    if let RunNetwork::Egress(plan) = network {
        let host = plan.proxy_address.map_or_else(
            || PROXY_ADDRESS_PLACEHOLDER.to_owned(),
            |ip| match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            },
        );
        let url = format!("http://{host}:{}", plan.proxy_port);
        for key in agentguard_container::PROXY_VARIABLES {
            let value = if key.eq_ignore_ascii_case("no_proxy") {
                ""
            } else {
                url.as_str()
            };
            env.push(json!({"name": key, "value": value}));
        }
    }
    env
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

fn job(
    request: &RunRequest<'_>,
    settings: &K8sSettings,
    pod: Value,
    weakened: &[Weakened],
) -> Value {
    let names: Vec<&str> = weakened.iter().map(|w| w.name()).collect();
    let timeout = i64::try_from(request.spec.timeout().as_secs()).unwrap_or(i64::MAX);
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": request.run_id,
            "namespace": settings.namespace,
            "labels": run_labels(request),
            "annotations": {
                "agentguard.dev/command": request.invocation.command(),
                "agentguard.dev/weakened": names.join(","),
            },
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": timeout.max(1),
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED,
            "template": {
                "metadata": {"labels": {LABEL_RUN: request.run_id, LABEL_ROLE: "sandbox"}},
                "spec": pod,
            },
        },
    })
}

/// Deny all for `none`; for `egress`, only the run's proxy pod on its port.
fn sandbox_policy(request: &RunRequest<'_>, settings: &K8sSettings) -> Value {
    let egress = match &request.network {
        RunNetwork::None => json!([]),
        RunNetwork::Egress(plan) => json!([{
            "to": [{"podSelector": {"matchLabels": {LABEL_PROXY: request.run_id}}}],
            "ports": [{"protocol": "TCP", "port": plan.proxy_port}],
        }]),
    };
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": request.run_id,
            "namespace": settings.namespace,
            "labels": run_labels(request),
        },
        "spec": {
            "podSelector": {"matchLabels": {LABEL_RUN: request.run_id, LABEL_ROLE: "sandbox"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    })
}

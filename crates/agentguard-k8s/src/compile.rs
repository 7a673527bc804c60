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

use agentguard_container::ContainerSpec;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::model::{
    CONTAINER, LABEL_PROXY, LABEL_ROLE, LABEL_RUN, Manifests, PROXY_ADDRESS_PLACEHOLDER,
    RunNetwork, RunRequest, TTL_AFTER_FINISHED, Weakened, pull_policy, restricted_container,
    restricted_pod, run_labels,
};
use crate::settings::K8sSettings;

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
    let pull = pull_policy(spec.image());
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
        for (key, value) in agentguard_container::proxy_environment(&url, false) {
            env.push(json!({"name": key, "value": value}));
        }
    }
    env
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

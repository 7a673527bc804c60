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
//! deadline from `timeout`, and the static relay as the entrypoint, which takes the isolation
//! receipt before the command starts (`receipt.rs`). Two defaults have no Pod field: `noexec` on `/tmp` and the pids
//! limit; they are reported as [`Weakened`], and the run refuses unless the config accepts
//! each by name.

use std::net::IpAddr;

use agentguard_container::ContainerSpec;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PersistentVolumeClaimVolumeSource, PodDNSConfig,
    PodTemplateSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::error::{Error, Result};
use crate::model::{
    CONTAINER, LABEL_PROXY, LABEL_ROLE, LABEL_RUN, Manifests, PROXY_ADDRESS_PLACEHOLDER,
    RunNetwork, RunRequest, TTL_AFTER_FINISHED, Weakened, labels, literal, policy_port,
    pull_policy, resources, restricted_container, restricted_pod, run_meta, selector, to_json,
};
use crate::settings::K8sSettings;

/// Compiles a run; `settings` must have been validated.
pub fn compile(request: &RunRequest<'_>, settings: &K8sSettings) -> Result<Manifests> {
    crate::settings::dns_label("run id", request.run_id)?;
    let spec = request.spec;
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
    let mut pod = restricted_pod(spec.user());
    pod.restart_policy = Some("Never".into());
    pod.share_process_namespace = Some(true);
    pod.termination_grace_period_seconds = Some(5);
    // No DNS: a name can only be resolved by the egress proxy.
    pod.dns_policy = Some("None".into());
    pod.dns_config = Some(PodDNSConfig {
        nameservers: Some(vec!["127.0.0.1".into()]),
        ..PodDNSConfig::default()
    });
    pod.runtime_class_name = runtime_class(spec, settings)?;
    let (mut mounts, mut volumes) = sandbox_volumes(request, settings);
    let relay = crate::receipt::relay_parts(spec, settings, request.invocation.argv())?;
    mounts.push(relay.mount);
    volumes.push(relay.volume);
    pod.init_containers = Some(vec![relay.init]);
    pod.containers = vec![Container {
        name: CONTAINER.into(),
        image: Some(spec.image().to_owned()),
        image_pull_policy: Some(pull_policy(spec.image()).into()),
        command: Some(relay.command),
        env: Some(environment(spec, &request.network)),
        resources: Some(resources(
            &format!("{}m", spec.cpus().millicores()),
            &spec.memory().bytes().to_string(),
        )),
        security_context: Some(restricted_container()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        volume_mounts: Some(mounts),
        working_dir: settings
            .workspace_claim
            .as_ref()
            .map(|_| agentguard_container::WORKSPACE_TARGET.to_owned()),
        ..Container::default()
    }];
    pod.volumes = Some(volumes);
    let weakened = vec![Weakened::TmpNoexec, Weakened::Pids];
    let job = job(request, settings, pod, &weakened);
    let proxy = match &request.network {
        RunNetwork::Egress(plan) => Some(crate::proxy::objects(request, settings, plan)?),
        RunNetwork::None => None,
    };
    Ok(Manifests {
        job: to_json("Job", &job)?,
        network_policy: to_json("NetworkPolicy", &sandbox_policy(request, settings))?,
        proxy,
        weakened,
    })
}

/// `/tmp` as a size-limited memory emptyDir, and the workspace claim when there is one.
fn sandbox_volumes(
    request: &RunRequest<'_>,
    settings: &K8sSettings,
) -> (Vec<VolumeMount>, Vec<Volume>) {
    let mut mounts = vec![VolumeMount {
        name: "tmp".into(),
        mount_path: "/tmp".into(),
        ..VolumeMount::default()
    }];
    let mut volumes = vec![Volume {
        name: "tmp".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(Quantity(request.spec.tmpfs_size().bytes().to_string())),
        }),
        ..Volume::default()
    }];
    if let Some(claim) = &settings.workspace_claim {
        let read_only = Some(!request.workspace_rw);
        mounts.push(VolumeMount {
            name: "workspace".into(),
            mount_path: agentguard_container::WORKSPACE_TARGET.into(),
            read_only,
            ..VolumeMount::default()
        });
        volumes.push(Volume {
            name: "workspace".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only,
            }),
            ..Volume::default()
        });
    }
    (mounts, volumes)
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
fn environment(spec: &ContainerSpec, network: &RunNetwork) -> Vec<EnvVar> {
    let var = |name: &str, value: String| EnvVar {
        name: name.to_owned(),
        value: Some(literal(&value)),
        value_from: None,
    };
    let mut env: Vec<EnvVar> = spec
        .environment()
        .iter()
        .map(|(k, v)| var(k, v.clone()))
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
        let routes = !plan.routes.is_empty();
        for (key, value) in agentguard_container::proxy_environment(&url, false) {
            // A route is reached directly (origin-form), never through the proxy variables.
            let value = match (routes, key.eq_ignore_ascii_case("no_proxy")) {
                (true, true) => host.clone(),
                _ => value,
            };
            env.push(var(key, value));
        }
        for route in &plan.routes {
            if let Some(variable) = &route.env {
                env.push(var(variable, format!("{url}/{}", route.name)));
            }
        }
    }
    env
}

fn job(
    request: &RunRequest<'_>,
    settings: &K8sSettings,
    pod: k8s_openapi::api::core::v1::PodSpec,
    weakened: &[Weakened],
) -> Job {
    let names: Vec<&str> = weakened.iter().map(|w| w.name()).collect();
    let timeout = i64::try_from(request.spec.timeout().as_secs()).unwrap_or(i64::MAX);
    let mut metadata = run_meta(request, &settings.namespace, request.run_id);
    metadata.annotations = Some(labels([
        ("agentguard.dev/command", request.invocation.command()),
        ("agentguard.dev/weakened", names.join(",").as_str()),
    ]));
    Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(timeout.max(1)),
            ttl_seconds_after_finished: Some(TTL_AFTER_FINISHED),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels([
                        (LABEL_RUN, request.run_id),
                        (LABEL_ROLE, "sandbox"),
                    ])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// Deny all for `none`; for `egress`, only the run's proxy pod on its port.
fn sandbox_policy(request: &RunRequest<'_>, settings: &K8sSettings) -> NetworkPolicy {
    let egress = match &request.network {
        RunNetwork::None => vec![],
        RunNetwork::Egress(plan) => vec![NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                pod_selector: Some(selector([(LABEL_PROXY, request.run_id)])),
                ..NetworkPolicyPeer::default()
            }]),
            ports: Some(vec![policy_port("TCP", plan.proxy_port)]),
        }],
    };
    NetworkPolicy {
        metadata: run_meta(request, &settings.namespace, request.run_id),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector([
                (LABEL_RUN, request.run_id),
                (LABEL_ROLE, "sandbox"),
            ])),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![]),
            egress: Some(egress),
        }),
    }
}

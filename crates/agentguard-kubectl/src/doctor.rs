//! `agentguard doctor` for a cluster: kubectl within one minor version of the server, a server
//! the manifests are checked against, the namespace and its Pod Security level, the
//! RuntimeClass for `runtime = "runsc"`, the weakened defaults and whether they are accepted,
//! and the NetworkPolicy canary, whose verdict every run then requires.

use agentguard_container::doctor::{Finding, Level};
use agentguard_k8s::{K8sSettings, Weakened};

use crate::canary::{self, Verdict};
use crate::error::MIN_MINOR;
use crate::kubectl::Kubectl;

/// The Pod Security label of a namespace.
const PSA_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

fn finding(level: Level, what: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding {
        level,
        what: what.into(),
        fix: fix.into(),
    }
}

/// What the cluster can enforce for runs of this config. `gvisor`: the config asks for runsc;
/// `labels`: the canary's owner labels (so `gc` finds a canary a killed doctor left).
pub async fn diagnose(
    kubectl: &Kubectl,
    settings: &K8sSettings,
    gvisor: bool,
    accepted: &[Weakened],
    labels: &[(String, String)],
) -> Vec<Finding> {
    let mut findings = Vec::new();
    match versions(kubectl).await {
        Ok(found) => findings.extend(found),
        Err(unreachable) => {
            findings.push(unreachable);
            return findings;
        }
    }
    let namespace = kubectl.namespace().to_owned();
    findings.extend(namespace_findings(kubectl, &namespace).await);
    if gvisor {
        findings.push(runtime_class(kubectl, settings).await);
    }
    for weakened in Weakened::ALL {
        findings.push(if accepted.contains(weakened) {
            finding(
                Level::Warn,
                format!(
                    "`{}` is weakened on Kubernetes (accepted by [kubernetes] accept_weakened): {}",
                    weakened.name(),
                    weakened.why()
                ),
                "",
            )
        } else {
            finding(
                Level::Fail,
                format!(
                    "`{}` is weakened on Kubernetes and not accepted, so runs are refused: {}",
                    weakened.name(),
                    weakened.why()
                ),
                format!(
                    "add \"{}\" to [kubernetes] accept_weakened once the cluster compensates",
                    weakened.name()
                ),
            )
        });
    }
    findings.push(match canary::run(kubectl, settings, labels).await {
        Ok(Verdict::Blocked) => finding(Level::Ok, format!("NetworkPolicy is enforced in {namespace}: the canary could not reach the API server (recorded in ConfigMap {}; runs may go ahead for 24 h)", canary::RECORD), ""),
        Ok(Verdict::Reached(what)) => finding(Level::Fail, format!("NetworkPolicy is NOT enforced in {namespace}: the canary, under a deny-all policy, reached {what}; runs are refused"), "use a CNI that enforces NetworkPolicy (Calico, Cilium), then run doctor again"),
        Err(e) => finding(Level::Fail, format!("the NetworkPolicy canary could not run: {e}; runs are refused until it has"), "fix what it names, then run doctor again"),
    });
    findings
}

async fn runtime_class(kubectl: &Kubectl, settings: &K8sSettings) -> Finding {
    let Some(class) = &settings.runtime_class else {
        return finding(
            Level::Fail,
            "runtime = \"runsc\" but [kubernetes] runtime_class is not set",
            "set it to the RuntimeClass whose handler is runsc",
        );
    };
    match kubectl.get("runtimeclasses.node.k8s.io", class).await {
        Ok(Some(rc)) if rc["handler"] == "runsc" => finding(
            Level::Ok,
            format!("RuntimeClass {class} exists with handler runsc"),
            "",
        ),
        Ok(Some(rc)) => finding(
            Level::Warn,
            format!(
                "RuntimeClass {class} has handler {}, not runsc: make sure it is gVisor",
                rc["handler"]
            ),
            "",
        ),
        Ok(None) => finding(
            Level::Fail,
            format!("RuntimeClass {class} does not exist: runs would not be scheduled"),
            "create it (handler runsc) on a node pool with gVisor",
        ),
        Err(e) => finding(
            Level::Fail,
            format!("RuntimeClass {class} cannot be read: {e}"),
            "grant this user get on runtimeclasses",
        ),
    }
}

/// kubectl's skew to the server, and the server's version; `Err` when the cluster cannot be reached.
async fn versions(kubectl: &Kubectl) -> Result<Vec<Finding>, Finding> {
    let mut findings = Vec::new();
    match kubectl.versions().await {
        Err(e) => {
            return Err(finding(
                Level::Fail,
                format!("kubectl cannot reach the cluster: {e}"),
                "check the kubeconfig, [kubernetes] context, and that the API server answers",
            ));
        }
        Ok(((_, client), (major, server))) => {
            let skew = client.abs_diff(server);
            findings.push(if skew <= 1 {
                finding(Level::Ok, format!("kubectl 1.{client} and the server 1.{server} are within one minor version"), "")
            } else {
                finding(Level::Fail, format!("kubectl 1.{client} and the server 1.{server} are {skew} minor versions apart (one is supported)"), "install a kubectl within one minor version of the server")
            });
            findings.push(if major == 1 && server >= MIN_MINOR {
                finding(Level::Ok, format!("the server runs Kubernetes {major}.{server}, which the manifests are checked against"), "")
            } else {
                finding(Level::Fail, format!("the server runs Kubernetes {major}.{server}; the manifests are checked against 1.{MIN_MINOR} and later, and an older server drops fields it does not know"), "upgrade the cluster")
            });
        }
    }
    Ok(findings)
}

/// The namespace, and its Pod Security level.
async fn namespace_findings(kubectl: &Kubectl, namespace: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    match kubectl.get("namespaces", namespace).await {
        Ok(Some(ns)) => {
            findings.push(finding(
                Level::Ok,
                format!("namespace {namespace} exists"),
                "",
            ));
            let level = ns["metadata"]["labels"][PSA_ENFORCE]
                .as_str()
                .unwrap_or("(none)")
                .to_owned();
            findings.push(if level == "restricted" {
                finding(Level::Ok, format!("namespace {namespace} enforces Pod Security `restricted`"), "")
            } else {
                finding(Level::Warn, format!("namespace {namespace} enforces Pod Security `{level}`: agentguard's pods meet `restricted`, but other pods there need not"), format!("kubectl label namespace {namespace} {PSA_ENFORCE}=restricted"))
            });
        }
        Ok(None) => findings.push(finding(
            Level::Fail,
            format!("namespace {namespace} does not exist"),
            format!("kubectl create namespace {namespace}, or set [kubernetes] namespace"),
        )),
        Err(e) => findings.push(finding(
            Level::Fail,
            format!("namespace {namespace} cannot be read: {e}"),
            "grant this user get on namespaces, or check the namespace",
        )),
    }
    findings
}

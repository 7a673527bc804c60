//! `engine = "kubernetes"` and the `[kubernetes]` table: where runs go on the cluster, and the
//! seed defaults the operator accepts to be weakened there (`accept_weakened`); a run refuses
//! every other weakening.

use serde::Deserialize;

use crate::error::KeyError;

/// The engine word that selects Kubernetes.
pub(crate) const ENGINE: &str = "kubernetes";

/// The `[kubernetes]` table.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KubernetesTable {
    pub namespace: String,
    pub context: Option<String>,
    pub runtime_class: Option<String>,
    pub workspace_claim: Option<String>,
    #[schemars(required)]
    pub proxy_image: Option<String>,
    #[serde(default)]
    pub accept_weakened: Vec<String>,
}

/// The checked `[kubernetes]` settings of a config.
#[derive(Debug, Clone)]
pub struct KubernetesConfig {
    /// The checked settings: namespace, context, runtime class, claim, proxy image.
    pub settings: agentguard_k8s::K8sSettings,
    /// The weakened hardening the operator accepts on this cluster.
    pub accept_weakened: Vec<agentguard_k8s::Weakened>,
}

/// The checked table when the engine is Kubernetes; a table without the engine, or the engine
/// without a table, is a mistake.
pub(crate) fn from_file(
    on_cluster: bool,
    table: Option<KubernetesTable>,
) -> Result<Option<KubernetesConfig>, KeyError> {
    match (on_cluster, table) {
        (true, Some(table)) => table.check().map(Some),
        (true, None) => Err(KeyError::new(
            "kubernetes",
            "engine = \"kubernetes\" needs a [kubernetes] table with at least `namespace`",
        )),
        (false, Some(_)) => Err(KeyError::new(
            "kubernetes",
            "a [kubernetes] table is only read with engine = \"kubernetes\"; set it or remove the table",
        )),
        (false, None) => Ok(None),
    }
}

impl KubernetesTable {
    /// Checks the names and the weakenings named.
    pub(crate) fn check(self) -> Result<KubernetesConfig, KeyError> {
        if self.proxy_image.is_none() {
            return Err(KeyError::new(
                "kubernetes.proxy_image",
                "is required: every run's pod takes its isolation receipt with the relay of this image's agentguard (and egress runs and the NetworkPolicy canary run in it); set it to an image with agentguard on its PATH, by digest (docs/kubernetes.md, \"The proxy image\")",
            ));
        }
        let settings = agentguard_k8s::K8sSettings {
            namespace: self.namespace,
            context: self.context,
            runtime_class: self.runtime_class,
            workspace_claim: self.workspace_claim,
            proxy_image: self.proxy_image,
        };
        settings
            .validate()
            .map_err(|e| KeyError::new("kubernetes", e.to_string()))?;
        let mut accept = Vec::new();
        for name in &self.accept_weakened {
            let known = agentguard_k8s::Weakened::ALL
                .iter()
                .find(|w| w.name() == name);
            match known {
                Some(w) => accept.push(*w),
                None => {
                    let names: Vec<&str> = agentguard_k8s::Weakened::ALL
                        .iter()
                        .map(|w| w.name())
                        .collect();
                    return Err(KeyError::new(
                        "kubernetes.accept_weakened",
                        format!(
                            "{name:?} is not a weakening; the ones Kubernetes forces are {}",
                            names.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(KubernetesConfig {
            settings,
            accept_weakened: accept,
        })
    }
}

/// The top-level `accept_weakened`: on a local engine only `limits`; on a cluster, none (its
/// own list is `[kubernetes] accept_weakened`).
pub(crate) fn check_weakened(accepted: &[String], on_cluster: bool) -> Result<(), KeyError> {
    let key = "accept_weakened";
    match accepted.iter().find(|w| *w != "limits" || on_cluster) {
        None => Ok(()),
        Some(_) if on_cluster => Err(KeyError::new(
            key,
            "on Kubernetes, write it in the [kubernetes] table",
        )),
        Some(other) => Err(KeyError::new(
            key,
            format!(
                "{other:?} is not a weakening a local engine may have; the only one is \"limits\" (a rootless engine that would apply no memory, cpus or pids limit)"
            ),
        )),
    }
}

//! The `[kubernetes]` table, checked: names that Kubernetes accepts, a proxy image for
//! `network = "egress"`.

use crate::error::{Error, Result};

/// Where and how runs go on the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K8sSettings {
    /// The namespace every object of a run is created in.
    pub namespace: String,
    /// The kubectl context (`None`: kubectl's current one).
    pub context: Option<String>,
    /// The RuntimeClass used when `runtime = "runsc"`.
    pub runtime_class: Option<String>,
    /// A PersistentVolumeClaim mounted at /workspace (read-only unless `rw`).
    pub workspace_claim: Option<String>,
    /// The image of the egress proxy (one with `agentguard` on its PATH), for egress runs.
    pub proxy_image: Option<String>,
}

impl K8sSettings {
    /// Checks every name: lower-case DNS labels (RFC 1123) of at most 63 characters.
    pub fn validate(&self) -> Result<()> {
        dns_label("kubernetes.namespace", &self.namespace)?;
        for (field, value) in [
            ("kubernetes.runtime_class", &self.runtime_class),
            ("kubernetes.workspace_claim", &self.workspace_claim),
        ] {
            if let Some(value) = value {
                dns_label(field, value)?;
            }
        }
        if let Some(image) = &self.proxy_image {
            agentguard_container::check_image("kubernetes.proxy_image", image).map_err(|e| {
                Error::Invalid {
                    field: "kubernetes.proxy_image",
                    value: image.clone(),
                    why: match e {
                        agentguard_container::Error::Invalid { reason, .. } => reason,
                        other => other.to_string(),
                    },
                }
            })?;
        }
        if let Some(context) = &self.context
            && (context.is_empty()
                || context.starts_with('-')
                || context.contains(char::is_control))
        {
            return Err(Error::Invalid {
                field: "kubernetes.context",
                value: context.clone(),
                why: "a kubectl context name, not empty, not starting with `-`".into(),
            });
        }
        Ok(())
    }
}

/// An RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters; `field`
/// names where the value came from.
pub fn dns_label(field: &'static str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid {
            field,
            value: value.to_owned(),
            why: "a lower-case DNS label: letters, digits and `-`, at most 63, not starting or ending with `-`".into(),
        })
    }
}

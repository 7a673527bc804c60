//! What only one kind of target refuses, once the spec is built: on a cluster `[egress]
//! nameservers` and the workspace paths (`writable`, `hidden`), on this machine more CPUs than
//! it has, for the spec and for every command's own value.

use std::path::Path;

use agentguard_container::ContainerSpec;

use crate::egress::Commands;
use crate::error::{ConfigError, KeyError};

/// What only one kind of target refuses: `[egress] nameservers` on a cluster (its proxy pod
/// resolves through kube-dns, the only DNS its NetworkPolicy allows), and on this machine more
/// CPUs than it has (the local engine refuses them only when the container starts).
pub(crate) fn check(
    on_cluster: bool,
    commands: &Commands,
    spec: &ContainerSpec,
    path: &Path,
) -> Result<(), ConfigError> {
    if on_cluster && commands.has_nameservers() {
        return Err(ConfigError::Key {
            path: path.to_owned(),
            error: KeyError::new(
                "[egress] nameservers",
                "not used on Kubernetes: the cluster's proxy pod resolves through kube-dns (the only DNS its NetworkPolicy allows); remove the key",
            ),
        });
    }
    let names: Vec<&String> = spec.command_settings().keys().collect();
    let has_paths = |s: &ContainerSpec| !s.writable().is_empty() || !s.hidden().is_empty();
    if on_cluster && (has_paths(spec) || names.iter().any(|n| has_paths(&spec.for_command(n)))) {
        return Err(ConfigError::Key {
            path: path.to_owned(),
            error: KeyError::new(
                "writable, hidden",
                "not used on Kubernetes: the workspace is a claim on the cluster, not a folder here, so agentguard can neither check a writable path for links nor list what a hidden pattern matches; remove them (a subPath mount could make a folder writable, but not checked)",
            ),
        });
    }
    if !on_cluster {
        let available = std::thread::available_parallelism().map_or(1, usize::from);
        let in_file = |source| ConfigError::Spec {
            path: path.to_owned(),
            source,
        };
        spec.cpus().check_available(available).map_err(in_file)?;
        for name in names {
            let own = spec.for_command(name);
            own.cpus()
                .check_available(available)
                .map_err(|e| in_file(e.in_command(name)))?;
        }
    }
    Ok(())
}

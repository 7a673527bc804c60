//! Rootless engines: whether the limits of a run would really apply.
//!
//! Podman run by a user other than root is rootless. On a cgroup v1 host it then ignores
//! every resource limit (memory, cpus, pids) with one line on stderr and starts the container
//! anyway (ENGINES.md: `memory.limit_in_bytes` 9223372036854771712, no `pids.max`, exit 0).
//! On cgroup v2 the limits apply only when the user's systemd slice has the `memory`, `pids`
//! and `cpu` controllers delegated to it. A run whose limits would not apply is refused before
//! it starts (`limits_not_enforced`) unless the config accepts it (`accept_weakened =
//! ["limits"]`); `doctor` fails for it. These are file reads, no engine call.

use std::path::Path;

use crate::engine::Engine;
use crate::kind::EngineKind;

/// The controllers the limits need: `memory`, `pids` (`--pids-limit`), `cpu` (`--cpus`).
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// True when `engine` runs rootless for this process: Podman, and this user is not root.
pub(crate) fn is_rootless(engine: &Engine) -> bool {
    engine.kind == EngineKind::Podman && crate::values::own_ids().is_ok_and(|(uid, _)| uid != 0)
}

/// Why a rootless engine would not apply the limits on this host, if it would not.
pub(crate) fn unenforced_limits() -> Option<String> {
    let uid = crate::values::own_ids().map_or(0, |(uid, _)| uid);
    unenforced_limits_in(Path::new("/sys/fs/cgroup"), uid)
}

/// [`unenforced_limits`] for the cgroup tree at `root` and the user `uid`.
pub(crate) fn unenforced_limits_in(root: &Path, uid: u32) -> Option<String> {
    if !root.join("cgroup.controllers").exists() {
        return Some(
            "this host has cgroup v1, where a rootless engine cannot set limits".to_owned(),
        );
    }
    let slice = root.join(format!(
        "user.slice/user-{uid}.slice/user@{uid}.service/cgroup.controllers"
    ));
    let delegated = std::fs::read_to_string(&slice).unwrap_or_default();
    let missing: Vec<&str> = CONTROLLERS
        .into_iter()
        .filter(|c| !delegated.split_whitespace().any(|d| d == *c))
        .collect();
    if missing.is_empty() {
        None
    } else {
        Some(format!(
            "cgroup v2 does not delegate the {} controller(s) to user {uid} ({} lists \"{}\")",
            missing.join(", "),
            slice.display(),
            delegated.trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::unenforced_limits_in;

    #[test]
    fn only_cgroup_v2_with_every_controller_delegated_enforces_the_limits() {
        let root = tempfile::tempdir().unwrap();
        let why = unenforced_limits_in(root.path(), 1001).unwrap();
        assert!(why.contains("cgroup v1"), "{why}");
        std::fs::write(root.path().join("cgroup.controllers"), "cpu memory pids io").unwrap();
        let service = root
            .path()
            .join("user.slice/user-1001.slice/user@1001.service");
        std::fs::create_dir_all(&service).unwrap();
        let why = unenforced_limits_in(root.path(), 1001).unwrap();
        assert!(why.contains("memory, pids, cpu"), "{why}");
        std::fs::write(service.join("cgroup.controllers"), "memory pids\n").unwrap();
        let why = unenforced_limits_in(root.path(), 1001).unwrap();
        assert!(
            why.contains("the cpu controller") && why.contains("\"memory pids\""),
            "{why}"
        );
        std::fs::write(service.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        assert_eq!(unenforced_limits_in(root.path(), 1001), None);
    }
}

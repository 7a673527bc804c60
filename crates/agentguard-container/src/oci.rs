//! `engine = "oci"`: a fresh sandbox per call with no daemon, by calling an OCI runtime (runc,
//! or gVisor's runsc) directly with a bundle agentguard writes.
//!
//! A run's image comes from the cache (`cache.rs`, filled once per image ID by `image.rs`
//! from the local Docker or Podman store); its `config.json` is a typed value built from the
//! spec (`config.rs`) with every default agentguard proves for Docker, and the default seccomp
//! filter (`seccomp.rs`). The bundle lives in a private folder under [`STATE_ROOT`] for the
//! run's length; the runtime keeps its state beside it, which is how `gc` finds what a killed
//! run left (`sweep.rs`). The runtime's stdout and stderr are the command's, so capture, caps,
//! timeouts and the receipt work as for the other engines; a kill goes through the runtime
//! (`kill ID KILL`, then `delete --force ID`).

pub(crate) mod cache;
pub(crate) mod config;
pub(crate) mod image;
pub(crate) mod layout;
pub(crate) mod seccomp;
pub(crate) mod sweep;
pub(crate) mod unpack;

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use agentguard_policy::Invocation;

use crate::argv::{EngineCommand, RunIdentity};
use crate::error::{Error, RunError};
use crate::kind::EngineKind;
use crate::spec::ContainerSpec;
use crate::values::Runtime;

pub use cache::{CACHE_VARIABLE, DEFAULT_CACHE, cache_root};
pub use config::{BundleInput, MASKED_PATHS, READONLY_PATHS};
pub use image::sweep_cache;

pub use crate::engine::{OCI_DEFAULT_RUNTIME as DEFAULT_RUNTIME, OCI_STATE_ROOT as STATE_ROOT};

/// The runtimes whose state folder exists under [`STATE_ROOT`] (what `gc` sweeps), each as
/// the engine that calls it and its global flags.
pub fn swept_runtimes() -> Vec<(crate::engine::Engine, Vec<String>)> {
    let Ok(listed) = std::fs::read_dir(STATE_ROOT) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in listed.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(runtime) = Runtime::parse(&name) else {
            continue;
        };
        let engine = crate::engine::Engine {
            kind: EngineKind::Oci,
            program: PathBuf::from(runtime.as_str()),
        };
        let global = engine.oci_global_args(runtime.is_gvisor());
        found.push((engine, global));
    }
    found.sort_by(|a, b| a.0.program.cmp(&b.0.program));
    found
}

/// The kill of a run's container, then its removal.
pub(crate) fn kill_commands(spec: &ContainerSpec, name: &str) -> (EngineCommand, EngineCommand) {
    (
        spec.engine_command(&["kill", name, "KILL"]),
        spec.engine_command(&["delete", "--force", name]),
    )
}

/// True when a runtime's error says the container is not there (already gone).
pub(crate) fn is_gone(stderr: &str) -> bool {
    let lower = stderr.to_ascii_lowercase();
    lower.contains("does not exist")
        || lower.contains("not found")
        || lower.contains("no such file")
}

/// A run's bundle folder, removed when the run ends.
#[derive(Debug)]
pub struct Bundle(PathBuf);

impl Drop for Bundle {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What must hold before an `engine = "oci"` run: root (the runtime would otherwise need a
/// user namespace, where cgroup v1 applies no limit).
pub(crate) fn preflight() -> std::result::Result<(), RunError> {
    let euid = crate::values::own_ids().map_or(u32::MAX, |(uid, _)| uid);
    if euid == 0 {
        return Ok(());
    }
    Err(RunError::Engine {
        engine: EngineKind::Oci,
        message: format!(
            "engine = \"oci\" runs the OCI runtime as root, and this process is uid {euid}: a rootless runtime would need a user namespace and delegated cgroups to apply the memory, cpus and pids limits. Run agentguard as root, or use engine = \"podman\" (rootless, where the host allows its limits)"
        ),
    })
}

/// Writes the bundle of a checked run (the image already in the cache under
/// `identity.image_id`) and returns the runtime command with the folder's guard.
pub(crate) fn write_bundle(
    spec: &ContainerSpec,
    invocation: &Invocation,
    identity: &RunIdentity,
) -> std::result::Result<(EngineCommand, Bundle), RunError> {
    let id = identity.image_id.as_deref().unwrap_or_default();
    let entry = image::entry(id).ok_or_else(|| RunError::ImageCache {
        image: spec.image().to_owned(),
        reason: format!("the cache has no entry for {id}"),
    })?;
    let config = config_of(spec, invocation, identity, &entry.rootfs(), &entry.env)?;
    let dir = spec.engine().oci_bundle(&identity.name);
    let engine_error = |message: String| RunError::Engine {
        engine: EngineKind::Oci,
        message,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| engine_error(format!("making the bundle {}: {e}", dir.display())))?;
    let bundle = Bundle(dir.clone());
    let text = serde_json::to_vec(&config).map_err(|e| engine_error(e.to_string()))?;
    std::fs::write(dir.join("config.json"), text)
        .map_err(|e| engine_error(format!("writing {}/config.json: {e}", dir.display())))?;
    Ok((spec.run_command(invocation, identity), bundle))
}

/// The engine command of a prepared run; for `engine = "oci"` its bundle is written now and
/// kept (the guard) until the run ends.
pub(crate) fn command_of(
    spec: &ContainerSpec,
    invocation: &Invocation,
    identity: &RunIdentity,
) -> Result<(EngineCommand, Option<Bundle>), RunError> {
    if spec.engine().kind == EngineKind::Oci {
        let (command, bundle) = write_bundle(spec, invocation, identity)?;
        return Ok((command, Some(bundle)));
    }
    Ok((spec.run_command(invocation, identity), None))
}

impl ContainerSpec {
    /// For `engine = "oci"`, the `config.json` a run of `invocation` with `identity` would
    /// write, pretty-printed (`--dry-run`); `None` for the other engines. The root file system
    /// is the cache's entry of the image when it holds one, else where the first run would
    /// unpack it; nothing is unpacked or written.
    pub fn oci_dry_run(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
    ) -> Option<std::result::Result<String, RunError>> {
        if self.engine().kind != EngineKind::Oci {
            return None;
        }
        let id = self.image().trim_start_matches("sha256:");
        let entry = image::entry(id);
        // A tag or digest names no cache entry until a run reads its ID from the store.
        let id = match id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            true => id.to_owned(),
            false => format!("<the ID of {}>", self.image()),
        };
        let rootfs = entry.as_ref().map_or_else(
            || cache::cache_root().join("images").join(&id).join("rootfs"),
            |e| e.rootfs(),
        );
        let env = entry.map(|e| e.env).unwrap_or_default();
        let result = config_of(self, invocation, identity, &rootfs, &env).and_then(|config| {
            serde_json::to_string_pretty(&config).map_err(|e| RunError::Engine {
                engine: EngineKind::Oci,
                message: e.to_string(),
            })
        });
        Some(result)
    }
}

/// The `config.json` of a run over `rootfs` with the image's `env`, and this kernel's filter.
fn config_of(
    spec: &ContainerSpec,
    invocation: &Invocation,
    identity: &RunIdentity,
    rootfs: &std::path::Path,
    env: &[String],
) -> std::result::Result<oci_spec::runtime::Spec, RunError> {
    let engine_error = |message: String| RunError::Engine {
        engine: EngineKind::Oci,
        message,
    };
    let filter = default_seccomp()
        .as_ref()
        .map_err(|e| engine_error(e.clone()))?;
    let input = BundleInput {
        rootfs,
        image_env: env,
        cgroup: format!("/agentguard/{}", identity.name),
        seccomp: filter.clone(),
    };
    spec.oci_config(invocation, identity, &input)
        .map_err(|e: Error| engine_error(e.to_string()))
}

/// The default seccomp filter for this kernel, reduced once per process.
fn default_seccomp() -> &'static std::result::Result<oci_spec::runtime::LinuxSeccomp, String> {
    static FILTER: OnceLock<std::result::Result<oci_spec::runtime::LinuxSeccomp, String>> =
        OnceLock::new();
    FILTER.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        seccomp::default_filter(release.trim())
    })
}

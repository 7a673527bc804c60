//! Which container engine CLI to drive: Docker or Podman, by name or by path.
//!
//! The two CLIs differ in ways that matter for hardening (Podman's `--runtime` is a global
//! flag, its read-only mode adds writable tmpfs mounts unless told not to), so the kind is
//! decided once, here, and the argv builder branches on it.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result, invalid};
use crate::kind::EngineKind;

/// The runtime `engine = "oci"` calls unless `runtime` names another.
pub const OCI_DEFAULT_RUNTIME: &str = "runc";
/// Where each OCI runtime keeps its state and agentguard its bundles: `OCI_STATE_ROOT/<runtime>/`.
pub const OCI_STATE_ROOT: &str = "/run/agentguard/oci";

/// An engine CLI: its kind and the program to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    /// The argv dialect.
    pub kind: EngineKind,
    /// The program: a bare name looked up on `PATH`, or a path.
    pub program: PathBuf,
}

impl Engine {
    /// `docker`, `podman`, or a path whose file name is `docker` or `podman` (optionally with
    /// a suffix such as `docker-20.10`); or `oci`, an OCI runtime called directly (the spec's
    /// `runtime` names it). Anything else is refused: the argv dialect must be known, never
    /// guessed.
    pub fn parse(value: &str) -> Result<Engine> {
        if value == EngineKind::Oci.program_name() {
            // The program is the OCI runtime, which `runtime` names (runc unless set).
            return Ok(Engine {
                kind: EngineKind::Oci,
                program: PathBuf::from(OCI_DEFAULT_RUNTIME),
            });
        }
        let file = Path::new(value)
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        let kind = if file == "docker" || file.starts_with("docker-") {
            EngineKind::Docker
        } else if file == "podman" || file.starts_with("podman-") {
            EngineKind::Podman
        } else {
            return Err(invalid(
                "engine",
                value,
                "expected `docker`, `podman`, a path to one of them, or `oci` (an OCI runtime called directly)",
            ));
        };
        Ok(Engine {
            kind,
            program: PathBuf::from(value),
        })
    }

    /// `engine = "oci"`: the folder of the state and bundles of the runtime this engine calls
    /// (`OCI_STATE_ROOT/<runtime program's file name>`).
    pub fn oci_root(&self) -> PathBuf {
        let name = self
            .program
            .file_name()
            .map_or_else(|| OCI_DEFAULT_RUNTIME.into(), |n| n.to_string_lossy());
        Path::new(OCI_STATE_ROOT).join(name.as_ref())
    }

    /// `engine = "oci"`: the folder of one run's bundle.
    pub fn oci_bundle(&self, name: &str) -> PathBuf {
        self.oci_root().join("bundles").join(name)
    }

    /// `engine = "oci"`: the runtime's global flags: its state folder; for gVisor no network
    /// but loopback, the mounted proxy socket usable, and the OCI seccomp filter applied
    /// inside the sandbox (which runsc otherwise does not load).
    pub fn oci_global_args(&self, gvisor: bool) -> Vec<String> {
        let state = self.oci_root().join("state");
        let mut args = vec!["--root".to_owned(), state.to_string_lossy().into_owned()];
        if gvisor {
            args.extend(["--network=none", "--host-uds=open", "--oci-seccomp"].map(str::to_owned));
        }
        args
    }

    /// The engines installed here, Docker first: those whose program is on `PATH`.
    pub fn installed() -> Vec<Engine> {
        [EngineKind::Docker, EngineKind::Podman]
            .into_iter()
            .filter(|kind| on_path(kind.program_name()))
            .map(Engine::of_kind)
            .collect()
    }

    /// The first installed engine (Docker before Podman), or [`Error::NoEngine`].
    pub fn detect() -> Result<Engine> {
        Engine::installed()
            .into_iter()
            .next()
            .ok_or(Error::NoEngine)
    }

    /// The engine of this kind, found on `PATH`.
    pub fn of_kind(kind: EngineKind) -> Engine {
        Engine {
            kind,
            program: PathBuf::from(kind.program_name()),
        }
    }
}

/// True when `program` is a file in one of the `PATH` directories: how engines and their
/// helpers are found.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

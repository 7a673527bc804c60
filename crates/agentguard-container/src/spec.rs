//! The container specification: the seed's parameters, their defaults, and their validation.
//!
//! Every value is checked when the spec is built, so a bad configuration fails with a message
//! that names the field and the value before any engine is started. Defaults are the hardened
//! ones from SPEC.md: no network, user nobody, 512m memory without swap, one CPU, 128 pids,
//! a 64m noexec /tmp, a read-only workspace, and images that must already be present.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use agentguard_policy::CommandAllowlist;

use crate::engine::Engine;
use crate::kind::EngineKind;
use crate::values::{ByteSize, Cpus, Pull, Runtime, UserIds};

pub use crate::values::WorkspaceMode;

/// The variables a run with a relay sets (pointing at the relay, or empty): never taken from
/// the spec's environment.
pub const PROXY_VARIABLES: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// `NO_PROXY` of a run with credential routes: they are served on the container's own
/// loopback, where only the relay listens, so clients must not send them to the proxy
/// variables' CONNECT proxy.
pub const ROUTES_NO_PROXY: &str = "127.0.0.1,localhost";

/// The value of each of [`PROXY_VARIABLES`] for a run whose proxy is `url` (`NO_PROXY` empty,
/// or [`ROUTES_NO_PROXY`] when the run has routes), the same for a local relay and a
/// cluster's proxy Service.
pub fn proxy_environment(
    url: &str,
    routes: bool,
) -> impl Iterator<Item = (&'static str, String)> + '_ {
    PROXY_VARIABLES.iter().map(move |key| {
        let value = match (key.eq_ignore_ascii_case("no_proxy"), routes) {
            (true, true) => ROUTES_NO_PROXY.to_owned(),
            (true, false) => String::new(),
            (false, _) => url.to_owned(),
        };
        (*key, value)
    })
}

/// A validated, hardened container specification.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSpec {
    pub(crate) engine: Engine,
    pub(crate) image: String,
    pub(crate) commands: CommandAllowlist,
    pub(crate) runtime: Option<Runtime>,
    pub(crate) workspace: Option<PathBuf>,
    pub(crate) workspace_mode: WorkspaceMode,
    pub(crate) user: UserIds,
    pub(crate) memory: ByteSize,
    pub(crate) cpus: Cpus,
    pub(crate) pids: u32,
    pub(crate) tmpfs_size: ByteSize,
    pub(crate) environment: BTreeMap<String, String>,
    pub(crate) nofile: u32,
    pub(crate) nproc: u32,
    pub(crate) timeout: Duration,
    pub(crate) max_output_bytes: usize,
    pub(crate) check: bool,
    pub(crate) pull: Pull,
    pub(crate) require_digest: bool,
    /// Run even where a rootless engine would not apply the limits (`accept_weakened =
    /// ["limits"]`).
    pub(crate) accept_weakened_limits: bool,
    /// The engine runs rootless for this process (Podman, not root): set at build.
    pub(crate) rootless: bool,
    /// Workspace folders mounted read-write over a read-only workspace (relative, checked).
    pub(crate) writable: Vec<String>,
    /// Gitignore-style patterns of workspace paths masked as empty inside the container.
    pub(crate) hidden: Vec<String>,
    /// The values commands set for themselves (`for_command`).
    pub(crate) per_command: BTreeMap<String, crate::settings::CommandSettings>,
    /// The user a command that writes to the workspace runs as (its owner, never root).
    pub(crate) rw_owner: Option<UserIds>,
}

/// How an image reference pins its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImagePin {
    /// A bare name or tag: whatever the local store holds under it.
    Tag,
    /// `name@sha256:...`: must match one of the local image's repo digests.
    Digest(String),
    /// `sha256:<image id>`: the local image with exactly this ID.
    Id(String),
}

impl ImagePin {
    /// How `image` pins its content: a tag, `name@sha256:...`, or `sha256:<id>`.
    pub fn of(image: &str) -> ImagePin {
        image_pin(image)
    }

    /// True when the content is fixed (a digest or an ID), so pulling it cannot change what
    /// runs; a tag must already be where it runs.
    pub fn is_pinned(&self) -> bool {
        !matches!(self, ImagePin::Tag)
    }
}

impl ContainerSpec {
    /// How the image reference is pinned.
    pub fn image_pin(&self) -> ImagePin {
        image_pin(&self.image)
    }

    /// The run's time limit.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The cap on stdout plus stderr.
    pub fn max_output_bytes(&self) -> usize {
        self.max_output_bytes
    }

    /// Whether a non-zero exit is an error.
    pub fn check(&self) -> bool {
        self.check
    }

    /// The host directory mounted at /workspace, and how.
    pub fn workspace(&self) -> Option<(&std::path::Path, WorkspaceMode)> {
        self.workspace.as_deref().map(|p| (p, self.workspace_mode))
    }

    /// The user the container runs as.
    pub fn user(&self) -> UserIds {
        self.user
    }

    /// The hardened defaults of SPEC.md, written once: docker, no network, user nobody, 512m
    /// memory without swap, one CPU, 128 pids, a 64m noexec /tmp, a read-only workspace, 300 s,
    /// 64 KiB of output, and images that must already be present.
    pub(crate) fn hardened(image: String) -> ContainerSpec {
        ContainerSpec {
            engine: Engine::of_kind(EngineKind::Docker),
            image,
            commands: CommandAllowlist::new(),
            runtime: None,
            workspace: None,
            workspace_mode: WorkspaceMode::ReadOnly,
            user: UserIds::NOBODY,
            memory: ByteSize::from_bytes(512 << 20),
            cpus: Cpus::ONE,
            pids: 128,
            tmpfs_size: ByteSize::from_bytes(64 << 20),
            environment: BTreeMap::new(),
            nofile: 1024,
            nproc: 4096,
            timeout: Duration::from_secs(300),
            max_output_bytes: 65536,
            check: false,
            pull: Pull::Never,
            require_digest: false,
            accept_weakened_limits: false,
            rootless: false,
            writable: Vec::new(),
            hidden: Vec::new(),
            per_command: BTreeMap::new(),
            rw_owner: None,
        }
    }

    /// The engine this spec runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Why the engine would not apply this spec's limits (a rootless engine on a host that
    /// does not delegate them), when it would not; see `rootless.rs`.
    pub fn unenforced_limits(&self) -> Option<String> {
        if self.rootless {
            crate::rootless::unenforced_limits()
        } else {
            None
        }
    }

    /// True when the config accepts a run whose limits would not apply.
    pub fn accepts_weakened_limits(&self) -> bool {
        self.accept_weakened_limits
    }

    /// The image reference.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The OCI runtime, if one was chosen.
    pub fn runtime(&self) -> Option<&Runtime> {
        self.runtime.as_ref()
    }

    /// The command allowlist.
    pub fn commands(&self) -> &CommandAllowlist {
        &self.commands
    }

    /// The memory limit (also the swap limit: no swap).
    pub fn memory(&self) -> ByteSize {
        self.memory
    }

    /// The CPU limit.
    pub fn cpus(&self) -> Cpus {
        self.cpus
    }

    /// The process limit.
    pub fn pids(&self) -> u32 {
        self.pids
    }

    /// The size of the noexec `/tmp`.
    pub fn tmpfs_size(&self) -> ByteSize {
        self.tmpfs_size
    }

    /// The configured environment.
    pub fn environment(&self) -> &BTreeMap<String, String> {
        &self.environment
    }

    /// Whether bare tags are refused.
    pub fn require_digest(&self) -> bool {
        self.require_digest
    }
}

/// What `image = "oci:..."` names: an OCI image layout directory, and which of its manifests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) dir: std::path::PathBuf,
    pub(crate) select: LayoutSelect,
}

/// Which manifest of a layout's `index.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LayoutSelect {
    /// The only one.
    Only,
    /// `oci:PATH:TAG`: the one whose `org.opencontainers.image.ref.name` is TAG.
    Tag(String),
    /// `oci:PATH@sha256:HEX`: the one with this digest.
    Digest(String),
}

/// Parses `oci:PATH`, `oci:PATH:TAG` (the tag follows the last `:` of the last path
/// component) or `oci:PATH@sha256:HEX`; `None` when `image` names no layout.
pub(crate) fn layout(image: &str) -> Option<Result<Layout, String>> {
    let rest = image.strip_prefix("oci:")?;
    let (path, select) = match rest.split_once("@sha256:") {
        Some((path, hex)) => (path, LayoutSelect::Digest(hex.to_owned())),
        None => {
            let last = rest.rfind('/').map_or(0, |i| i + 1);
            match rest[last..].rfind(':') {
                Some(i) => (
                    &rest[..last + i],
                    LayoutSelect::Tag(rest[last + i + 1..].to_owned()),
                ),
                None => (rest, LayoutSelect::Only),
            }
        }
    };
    Some(
        if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
            Err("an OCI image layout is named by an absolute path without `..`: oci:/PATH, oci:/PATH:TAG or oci:/PATH@sha256:<manifest digest>".to_owned())
        } else if select == LayoutSelect::Tag(String::new()) {
            Err("the tag after the last `:` is empty".to_owned())
        } else {
            Ok(Layout {
                dir: path.into(),
                select,
            })
        },
    )
}

pub(crate) fn image_pin(image: &str) -> ImagePin {
    if let Some(id) = image.strip_prefix("sha256:") {
        ImagePin::Id(id.to_owned())
    } else if let Some((_, digest)) = image.split_once("@sha256:") {
        ImagePin::Digest(digest.to_owned())
    } else {
        ImagePin::Tag
    }
}

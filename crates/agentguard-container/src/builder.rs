//! Building a [`ContainerSpec`]: typed setters over the hardened defaults, then `build`,
//! which reports the first bad value and checks what depends on several fields.
//!
//! Every value is checked before any engine is started, with a message that names the field
//! and the value.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use agentguard_policy::ParamSpec;

use crate::engine::Engine;
use crate::error::{Result, invalid};
use crate::kind::EngineKind;
use crate::spec::{ContainerSpec, ImagePin, WorkspaceMode, image_pin};
use crate::values::{ByteSize, Cpus, MIN_MEMORY, MIN_TMPFS, Pull, Runtime, UserIds};

/// Builder for [`ContainerSpec`]: each setter parses its value into a typed one (the first
/// bad value is reported by [`ContainerSpecBuilder::build`]), and `build` checks the rest.
#[derive(Debug)]
pub struct ContainerSpecBuilder {
    pub(crate) spec: ContainerSpec,
    pub(crate) commands: Vec<(String, Vec<String>, BTreeMap<String, ParamSpec>)>,
    pub(crate) error: Option<crate::Error>,
}

impl ContainerSpec {
    /// Starts a builder for `image` with every hardened default.
    pub fn builder(image: impl Into<String>) -> ContainerSpecBuilder {
        ContainerSpecBuilder {
            spec: ContainerSpec::hardened(image.into()),
            commands: Vec::new(),
            error: None,
        }
    }
}

impl ContainerSpecBuilder {
    /// Keeps a parsed value, or the first parse error.
    fn set<T>(mut self, parsed: Result<T>, apply: impl FnOnce(&mut ContainerSpec, T)) -> Self {
        match parsed {
            Ok(value) => apply(&mut self.spec, value),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// The time limit of a run (default 300 s); on expiry the container is killed by name.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.spec.timeout = timeout;
        self
    }

    /// The cap on stdout plus stderr (default 65536 bytes); past it the container is killed.
    pub fn max_output_bytes(mut self, max: usize) -> Self {
        self.spec.max_output_bytes = max;
        self
    }

    /// With `true`, a non-zero exit is an error instead of a result (default `false`).
    pub fn check(mut self, check: bool) -> Self {
        self.spec.check = check;
        self
    }

    /// The pull policy; only `never` is accepted: images must already be present.
    pub fn pull(self, pull: &str) -> Self {
        self.set(Pull::parse(pull), |spec, pull| spec.pull = pull)
    }

    /// Refuse images referenced by a bare tag (default `false`).
    pub fn require_digest(mut self, yes: bool) -> Self {
        self.spec.require_digest = yes;
        self
    }

    /// The engine (default: `docker`).
    pub fn engine(mut self, engine: Engine) -> Self {
        self.spec.engine = engine;
        self
    }

    /// Adds an allowlisted command: NAME and its fixed argv.
    pub fn command<I, S>(mut self, name: impl Into<String>, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let argv = argv.into_iter().map(Into::into).collect();
        self.commands.push((name.into(), argv, BTreeMap::new()));
        self
    }

    /// Adds an allowlisted command with typed params: its argv is a template whose `{P}`
    /// placeholders the checked values fill (`[commands.NAME.params.P]`).
    pub fn command_with_params(
        mut self,
        name: impl Into<String>,
        argv: Vec<String>,
        params: BTreeMap<String, ParamSpec>,
    ) -> Self {
        self.commands.push((name.into(), argv, params));
        self
    }

    /// The OCI runtime, for example `runsc` (gVisor). Unset means the engine's default.
    pub fn runtime(self, runtime: &str) -> Self {
        self.set(Runtime::parse(runtime), |spec, r| spec.runtime = Some(r))
    }

    /// The host directory mounted at `/workspace` (must be an absolute path).
    pub fn workspace(mut self, path: impl Into<PathBuf>) -> Self {
        self.spec.workspace = Some(path.into());
        self
    }

    /// Read-only (default) or read-write workspace.
    pub fn workspace_mode(mut self, mode: WorkspaceMode) -> Self {
        self.spec.workspace_mode = mode;
        self
    }

    /// `uid:gid`, numeric, never root (default `65534:65534`).
    pub fn user(self, user: &str) -> Self {
        self.set(UserIds::parse(user), |spec, ids| spec.user = ids)
    }

    /// The user as ids (see [`UserIds::for_rw_workspace`] for a read-write workspace).
    pub fn user_ids(mut self, ids: UserIds) -> Self {
        self.spec.user = ids;
        self
    }

    /// Memory limit, also used as the swap limit so there is no swap (default `512m`).
    pub fn memory(self, memory: &str) -> Self {
        let parsed = ByteSize::parse("memory", memory, MIN_MEMORY);
        self.set(parsed, |spec, size| spec.memory = size)
    }

    /// CPU limit (default `1`).
    pub fn cpus(self, cpus: &str) -> Self {
        self.set(Cpus::parse(cpus), |spec, cpus| spec.cpus = cpus)
    }

    /// Process limit (default 128).
    pub fn pids(mut self, pids: u32) -> Self {
        self.spec.pids = pids;
        self
    }

    /// Size of the noexec `/tmp` tmpfs (default `64m`).
    pub fn tmpfs_size(self, size: &str) -> Self {
        let parsed = ByteSize::parse("tmpfs_size", size, MIN_TMPFS);
        self.set(parsed, |spec, size| spec.tmpfs_size = size)
    }

    /// The open-files limit inside the container (default 1024; at most the host's hard limit,
    /// or the engine refuses to start the container).
    pub fn nofile(mut self, limit: u32) -> Self {
        self.spec.nofile = limit;
        self
    }

    /// Podman's per-uid process limit (default 4096; `pids` stays the real per-container
    /// limit, since RLIMIT_NPROC counts across the host).
    pub fn nproc(mut self, limit: u32) -> Self {
        self.spec.nproc = limit;
        self
    }

    /// One environment variable for the container. Nothing else from the host reaches it.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.spec.environment.insert(key.into(), value.into());
        self
    }

    /// Workspace folders mounted read-write over a read-only workspace (`writable`; each a
    /// real folder of the workspace with no symlink along it, checked at build).
    pub fn writable(mut self, entries: Vec<String>) -> Self {
        self.spec.writable = entries;
        self
    }

    /// Gitignore-style patterns of workspace paths masked as empty in the container
    /// (`hidden`; the matches are found when each run starts).
    pub fn hidden(mut self, patterns: Vec<String>) -> Self {
        self.spec.hidden = patterns;
        self
    }

    /// The values command `name` sets for itself (`[commands.NAME]`).
    pub fn command_settings(
        mut self,
        name: impl Into<String>,
        settings: crate::settings::CommandSettings,
    ) -> Self {
        self.spec.per_command.insert(name.into(), settings);
        self
    }

    /// Runs even where a rootless engine would not apply the memory, cpus and pids limits
    /// (`accept_weakened = ["limits"]`); by default such a run is refused before it starts.
    pub fn accept_weakened_limits(mut self, yes: bool) -> Self {
        self.spec.accept_weakened_limits = yes;
        self
    }

    /// Reports the first bad value, checks what depends on several fields, and returns the
    /// spec. `timeout` is at most [`MAX_TIMEOUT`], so no deadline arithmetic can overflow
    /// once a container runs.
    pub fn build(self) -> Result<ContainerSpec> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let mut spec = self.spec;
        validate_image(&spec.image)?;
        for (name, argv, params) in self.commands {
            spec.commands.insert_with_params(&name, argv, &params)?;
        }
        if let Some(path) = &spec.workspace {
            check_mount_source("workspace", path)?;
        }
        crate::effective::check_limits(&spec)?;
        crate::effective::check_commands(&mut spec)?;
        validate_pin(&spec.image, spec.require_digest)?;
        validate_layout(&spec)?;
        settle_runtime(&mut spec)?;
        spec.rootless = crate::rootless::is_rootless(&spec.engine);
        Ok(spec)
    }
}

/// Settles the runtime at build: for `engine = "oci"` the runtime (runc unless set) is the
/// program every command of the spec runs; a runtime given as a path is refused for Docker,
/// which only takes registered names.
fn settle_runtime(spec: &mut ContainerSpec) -> Result<()> {
    match spec.engine.kind {
        EngineKind::Oci => {
            let runtime = match spec.runtime.take() {
                Some(runtime) => runtime,
                None => Runtime::parse(crate::engine::OCI_DEFAULT_RUNTIME)?,
            };
            spec.engine.program = std::path::PathBuf::from(runtime.as_str());
            spec.runtime = Some(runtime);
            Ok(())
        }
        EngineKind::Docker if spec.runtime.as_ref().is_some_and(Runtime::is_path) => Err(invalid(
            "runtime",
            spec.runtime.as_ref().map_or("", |r| r.as_str()),
            "Docker takes a registered runtime name, not a path: register it in /etc/docker/daemon.json, or use engine = \"oci\"",
        )),
        _ => Ok(()),
    }
}

fn validate_pin(image: &str, require_digest: bool) -> Result<()> {
    match image_pin(image) {
        ImagePin::Tag if require_digest => Err(invalid(
            "image",
            image,
            "require_digest is set: reference the image as name@sha256:<digest> or sha256:<image id>",
        )),
        ImagePin::Digest(d) | ImagePin::Id(d)
            if d.len() != 64
                || !d
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) =>
        {
            Err(invalid(
                "image",
                image,
                "a sha256 digest or image ID is 64 lower-case hex digits",
            ))
        }
        _ => Ok(()),
    }
}

/// An image layout (`oci:PATH`) is well formed and runs on `engine = "oci"` only.
fn validate_layout(spec: &ContainerSpec) -> Result<()> {
    match crate::spec::layout(&spec.image) {
        Some(Err(why)) => Err(invalid("image", &spec.image, why)),
        Some(Ok(_)) if spec.engine.kind != EngineKind::Oci => Err(invalid(
            "image",
            &spec.image,
            "an OCI image layout (oci:PATH) runs only with engine = \"oci\"; Docker and Podman run images from their own stores",
        )),
        _ => Ok(()),
    }
}

fn validate_image(image: &str) -> Result<()> {
    check_image("image", image)
}

/// Checks an image reference (the config's `image`, a cluster's `proxy_image`; `field` names
/// it in the error): not empty, not an option, only the characters of a reference.
pub fn check_image(field: &'static str, image: &str) -> Result<()> {
    if image.is_empty() {
        return Err(invalid(
            field,
            image,
            "the image is empty; name a local image such as localhost/tools:latest",
        ));
    }
    if image.starts_with('-') {
        return Err(invalid(
            field,
            image,
            "an image reference cannot start with `-`",
        ));
    }
    if let Some(c) = image
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@')))
    {
        return Err(invalid(
            field,
            image,
            format!("character {c:?} is not allowed in an image reference"),
        ));
    }
    Ok(())
}

/// Checks a host path that becomes a bind mount's `source=`: absolute, UTF-8, and free of
/// the characters that are syntax in `--mount` (`field` names it in the error).
pub fn check_mount_source(field: &'static str, path: &std::path::Path) -> Result<()> {
    let text = path
        .to_str()
        .ok_or_else(|| invalid(field, path.to_string_lossy(), "the path is not valid UTF-8"))?;
    if !path.is_absolute() {
        return Err(invalid(
            field,
            text,
            format!("the {field} must be an absolute path"),
        ));
    }
    // The path is embedded in `--mount type=bind,source=...`, where `,` and `=` are syntax.
    if let Some(c) = text
        .chars()
        .find(|c| matches!(c, ',' | '=' | '\0' | '\n' | ':'))
    {
        return Err(invalid(
            field,
            text,
            format!(
                "character {c:?} cannot be passed safely to the engine's mount syntax; rename the directory"
            ),
        ));
    }
    Ok(())
}

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

use crate::engine::{Engine, EngineKind};
use crate::error::{Result, invalid};

/// How the workspace is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceMode {
    /// Read-only (the default).
    #[default]
    ReadOnly,
    /// Read-write.
    ReadWrite,
}

impl WorkspaceMode {
    /// Parses `ro` or `rw`.
    pub fn parse(value: &str) -> Result<WorkspaceMode> {
        match value {
            "ro" => Ok(WorkspaceMode::ReadOnly),
            "rw" => Ok(WorkspaceMode::ReadWrite),
            _ => Err(invalid("workspace_mode", value, "expected `ro` or `rw`")),
        }
    }
}

/// A validated, hardened container specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    pub(crate) engine: Engine,
    pub(crate) image: String,
    pub(crate) commands: CommandAllowlist,
    pub(crate) runtime: Option<String>,
    pub(crate) workspace: Option<PathBuf>,
    pub(crate) workspace_mode: WorkspaceMode,
    pub(crate) network: String,
    pub(crate) user: String,
    pub(crate) memory: String,
    pub(crate) cpus: String,
    pub(crate) pids: u32,
    pub(crate) tmpfs_size: String,
    pub(crate) environment: BTreeMap<String, String>,
    pub(crate) nofile: u32,
    pub(crate) nproc: u32,
    pub(crate) timeout: Duration,
    pub(crate) max_output_bytes: usize,
    pub(crate) check: bool,
    pub(crate) require_digest: bool,
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
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Returns the spec with another `uid:gid` (validated: never root).
    pub fn with_user(mut self, user: &str) -> Result<ContainerSpec> {
        validate_user(user)?;
        self.user = user.to_owned();
        Ok(self)
    }
    /// Starts a builder for `image` with every hardened default.
    pub fn builder(image: impl Into<String>) -> ContainerSpecBuilder {
        ContainerSpecBuilder {
            engine: Engine::of_kind(EngineKind::Docker),
            image: image.into(),
            commands: Vec::new(),
            runtime: None,
            workspace: None,
            workspace_mode: WorkspaceMode::ReadOnly,
            network: "none".into(),
            user: "65534:65534".into(),
            memory: "512m".into(),
            cpus: "1".into(),
            pids: 128,
            tmpfs_size: "64m".into(),
            environment: BTreeMap::new(),
            nofile: 1024,
            nproc: 4096,
            timeout: Duration::from_secs(300),
            max_output_bytes: 65536,
            check: false,
            pull: "never".into(),
            require_digest: false,
        }
    }

    /// The engine this spec runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The image reference.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The OCI runtime, if one was chosen.
    pub fn runtime(&self) -> Option<&str> {
        self.runtime.as_deref()
    }

    /// The command allowlist.
    pub fn commands(&self) -> &CommandAllowlist {
        &self.commands
    }
}

/// Builder for [`ContainerSpec`]; [`ContainerSpecBuilder::build`] validates every field.
#[derive(Debug, Clone)]
pub struct ContainerSpecBuilder {
    engine: Engine,
    image: String,
    commands: Vec<(String, Vec<String>)>,
    runtime: Option<String>,
    workspace: Option<PathBuf>,
    workspace_mode: WorkspaceMode,
    network: String,
    user: String,
    memory: String,
    cpus: String,
    pids: u32,
    tmpfs_size: String,
    environment: BTreeMap<String, String>,
    nofile: u32,
    nproc: u32,
    timeout: Duration,
    max_output_bytes: usize,
    check: bool,
    pull: String,
    require_digest: bool,
}

impl ContainerSpecBuilder {
    /// The time limit of a run (default 300 s); on expiry the container is killed by name.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The cap on stdout plus stderr (default 65536 bytes); past it the container is killed.
    pub fn max_output_bytes(mut self, max: usize) -> Self {
        self.max_output_bytes = max;
        self
    }

    /// With `true`, a non-zero exit is an error instead of a result (default `false`).
    pub fn check(mut self, check: bool) -> Self {
        self.check = check;
        self
    }

    /// The pull policy; only `never` is accepted: images must already be present.
    pub fn pull(mut self, pull: impl Into<String>) -> Self {
        self.pull = pull.into();
        self
    }

    /// Refuse images referenced by a bare tag (default `false`).
    pub fn require_digest(mut self, yes: bool) -> Self {
        self.require_digest = yes;
        self
    }

    /// The engine (default: `docker`).
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    /// Adds an allowlisted command: NAME and its fixed argv.
    pub fn command<I, S>(mut self, name: impl Into<String>, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.commands
            .push((name.into(), argv.into_iter().map(Into::into).collect()));
        self
    }

    /// The OCI runtime, for example `runsc` (gVisor). Unset means the engine's default.
    pub fn runtime(mut self, runtime: impl Into<String>) -> Self {
        self.runtime = Some(runtime.into());
        self
    }

    /// The host directory mounted at `/workspace` (must be an absolute path).
    pub fn workspace(mut self, path: impl Into<PathBuf>) -> Self {
        self.workspace = Some(path.into());
        self
    }

    /// Read-only (default) or read-write workspace.
    pub fn workspace_mode(mut self, mode: WorkspaceMode) -> Self {
        self.workspace_mode = mode;
        self
    }

    /// `none` (default) or the name of an engine network; `host` is refused.
    pub fn network(mut self, network: impl Into<String>) -> Self {
        self.network = network.into();
        self
    }

    /// `uid:gid`, numeric, never root (default `65534:65534`).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = user.into();
        self
    }

    /// Memory limit, also used as the swap limit so there is no swap (default `512m`).
    pub fn memory(mut self, memory: impl Into<String>) -> Self {
        self.memory = memory.into();
        self
    }

    /// CPU limit (default `1`).
    pub fn cpus(mut self, cpus: impl Into<String>) -> Self {
        self.cpus = cpus.into();
        self
    }

    /// Process limit (default 128).
    pub fn pids(mut self, pids: u32) -> Self {
        self.pids = pids;
        self
    }

    /// Size of the noexec `/tmp` tmpfs (default `64m`).
    pub fn tmpfs_size(mut self, size: impl Into<String>) -> Self {
        self.tmpfs_size = size.into();
        self
    }

    /// One environment variable for the container. Nothing else from the host reaches it.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.environment.insert(key.into(), value.into());
        self
    }

    /// Validates every field and returns the spec.
    pub fn build(self) -> Result<ContainerSpec> {
        validate_image(&self.image)?;
        let commands = CommandAllowlist::from_pairs(self.commands)?;
        if let Some(runtime) = &self.runtime {
            validate_token("runtime", runtime)?;
        }
        if let Some(path) = &self.workspace {
            validate_workspace(path)?;
        }
        validate_network(&self.network)?;
        validate_user(&self.user)?;
        validate_size("memory", &self.memory, 6 * 1024 * 1024)?;
        validate_size("tmpfs_size", &self.tmpfs_size, 4096)?;
        validate_cpus(&self.cpus)?;
        if self.pids == 0 {
            return Err(invalid(
                "pids",
                "0",
                "at least 1 process is needed; the default is 128",
            ));
        }
        for (key, value) in &self.environment {
            validate_env(key, value)?;
        }
        if self.pull != "never" {
            return Err(invalid(
                "pull",
                &self.pull,
                "only `never` is supported: load or build the image locally first, and pin it by digest or image ID",
            ));
        }
        if self.timeout.is_zero() {
            return Err(invalid("timeout", "0", "the time limit must be positive"));
        }
        if self.max_output_bytes == 0 {
            return Err(invalid(
                "max_output_bytes",
                "0",
                "the output cap must be positive",
            ));
        }
        if self.require_digest && image_pin(&self.image) == ImagePin::Tag {
            return Err(invalid(
                "image",
                &self.image,
                "require_digest is set: reference the image as name@sha256:<digest> or sha256:<image id>",
            ));
        }
        if let ImagePin::Digest(d) | ImagePin::Id(d) = image_pin(&self.image)
            && (d.len() != 64
                || !d
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        {
            return Err(invalid(
                "image",
                &self.image,
                "a sha256 digest or image ID is 64 lower-case hex digits",
            ));
        }
        Ok(ContainerSpec {
            engine: self.engine,
            image: self.image,
            commands,
            runtime: self.runtime,
            workspace: self.workspace,
            workspace_mode: self.workspace_mode,
            network: self.network,
            user: self.user,
            memory: self.memory,
            cpus: self.cpus,
            pids: self.pids,
            tmpfs_size: self.tmpfs_size,
            environment: self.environment,
            nofile: self.nofile,
            nproc: self.nproc,
            timeout: self.timeout,
            max_output_bytes: self.max_output_bytes,
            check: self.check,
            require_digest: self.require_digest,
        })
    }
}

fn image_pin(image: &str) -> ImagePin {
    if let Some(id) = image.strip_prefix("sha256:") {
        ImagePin::Id(id.to_owned())
    } else if let Some((_, digest)) = image.split_once("@sha256:") {
        ImagePin::Digest(digest.to_owned())
    } else {
        ImagePin::Tag
    }
}

fn validate_image(image: &str) -> Result<()> {
    if image.is_empty() {
        return Err(invalid(
            "image",
            image,
            "the image is empty; name a local image such as localhost/tools:latest",
        ));
    }
    if image.starts_with('-') {
        return Err(invalid(
            "image",
            image,
            "an image reference cannot start with `-`",
        ));
    }
    if let Some(c) = image
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@')))
    {
        return Err(invalid(
            "image",
            image,
            format!("character {c:?} is not allowed in an image reference"),
        ));
    }
    Ok(())
}

fn validate_token(field: &'static str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && !value.starts_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            value,
            "use letters, digits, `_`, `-` and `.`, not starting with `-`",
        ))
    }
}

fn validate_workspace(path: &std::path::Path) -> Result<()> {
    let text = path.to_str().ok_or_else(|| {
        invalid(
            "workspace",
            path.to_string_lossy(),
            "the path is not valid UTF-8",
        )
    })?;
    if !path.is_absolute() {
        return Err(invalid(
            "workspace",
            text,
            "the workspace must be an absolute path",
        ));
    }
    // The path is embedded in `--mount type=bind,source=...`, where `,` and `=` are syntax.
    if let Some(c) = text
        .chars()
        .find(|c| matches!(c, ',' | '=' | '\0' | '\n' | ':'))
    {
        return Err(invalid(
            "workspace",
            text,
            format!(
                "character {c:?} cannot be passed safely to the engine's mount syntax; rename the directory"
            ),
        ));
    }
    Ok(())
}

fn validate_network(network: &str) -> Result<()> {
    if network == "host" || network.starts_with("container:") || network.starts_with("ns:") {
        return Err(invalid(
            "network",
            network,
            "sharing the host's or another container's network namespace is never allowed; use `none`, or an internal network whose only way out is the egress proxy",
        ));
    }
    validate_token("network", network)
}

fn validate_user(user: &str) -> Result<()> {
    let parsed = user
        .split_once(':')
        .and_then(|(u, g)| Some((u.parse::<u32>().ok()?, g.parse::<u32>().ok()?)));
    match parsed {
        None => Err(invalid(
            "user",
            user,
            "expected numeric `uid:gid`, for example 65534:65534",
        )),
        Some((0, _)) | Some((_, 0)) => Err(invalid(
            "user",
            user,
            "the container never runs as root (uid 0 or gid 0); use 65534:65534 or your own uid:gid",
        )),
        Some(_) => Ok(()),
    }
}

/// Parses sizes such as `512m`, `1g`, `65536`, `64k` into bytes.
pub(crate) fn parse_size(value: &str) -> Option<u64> {
    let (digits, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => value.split_at(i),
        None => (value, ""),
    };
    let number: u64 = digits.parse().ok()?;
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

fn validate_size(field: &'static str, value: &str, minimum: u64) -> Result<()> {
    match parse_size(value) {
        None => Err(invalid(
            field,
            value,
            "expected a size such as 512m, 1g or 65536 (bytes)",
        )),
        Some(bytes) if bytes < minimum => Err(invalid(
            field,
            value,
            format!("at least {minimum} bytes are needed; engines refuse smaller limits"),
        )),
        Some(_) => Ok(()),
    }
}

fn validate_cpus(value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.chars().all(|c| c.is_ascii_digit() || c == '.')
        && value.parse::<f64>().is_ok_and(|v| v > 0.0 && v.is_finite());
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "cpus",
            value,
            "expected a positive number such as 1 or 0.5",
        ))
    }
}

fn validate_env(key: &str, value: &str) -> Result<()> {
    let mut chars = key.chars();
    let key_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !key_ok {
        return Err(invalid(
            "environment",
            key,
            "a variable name is letters, digits and `_`, not starting with a digit",
        ));
    }
    if value.contains('\0') || value.contains('\n') {
        // The value is not echoed: environment values may be secrets.
        return Err(invalid(
            "environment",
            key,
            "the value of this variable contains a NUL or newline",
        ));
    }
    Ok(())
}

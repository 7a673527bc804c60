//! The `agentguard run` configuration file: TOML with the seed's names, loaded strictly.
//!
//! Unknown keys are errors that name the key and its line; relative paths are relative to the
//! config file; every value is then parsed and validated by the container crate, whose errors
//! name the field and the value. The `[audit]` table names the audit log; `network`, the
//! `[egress]` table and the `[commands.NAME]` table form are read by `egress.rs`.
//!
//! The CLI loads a file with [`load`]; the Python package passes its keyword arguments as JSON
//! to [`from_json`]: both get the same checks and the same errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentguard_container::{ContainerSpec, ContainerSpecBuilder, Engine, WorkspaceMode};
use serde::Deserialize;

mod audit_log;
mod cluster_routes;
mod commands;
mod egress;
mod error;
mod floor;
mod hint;
mod json;
mod kubernetes;
mod params;
mod policy;
mod policy_file;
mod route_env;
mod route_grant;
mod routes;
mod target;
mod workspace;

pub use audit_log::{key_from_env, open_log, runs_log};
pub use cluster_routes::proxy_route;
pub use commands::{CommandEntry, CommandTable};
pub use egress::{Commands, EgressTable, FetchTable, RELAY_ENV, RUN_DIR_ENV, runs_dir};
pub use error::{ConfigError, KeyError};
pub use floor::{FLOOR_ENV, check_floor, proxy_grant};
pub use json::from_json;
pub use kubernetes::KubernetesConfig;
pub use policy::{check_ports, policy_from};
pub use policy_file::{PolicyFile, load_policy};
pub use routes::{RouteTable, Routes, SecretCheck, SecretSource};

/// A number or a string (`cpus = 1`, `cpus = "1.5"`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub(crate) enum Text {
    Int(i64),
    Float(f64),
    Str(String),
}

impl Text {
    fn into_string(self) -> String {
        self.to_text()
    }

    pub(crate) fn to_text(&self) -> String {
        match self {
            Text::Int(i) => i.to_string(),
            Text::Float(f) => f.to_string(),
            Text::Str(s) => s.clone(),
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct AuditTable {
    path: PathBuf,
    key_env: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    image: String,
    engine: Option<String>,
    runtime: Option<String>,
    workspace: Option<PathBuf>,
    workspace_mode: Option<String>,
    network: Option<String>,
    user: Option<String>,
    memory: Option<Text>,
    cpus: Option<Text>,
    pids: Option<u32>,
    tmpfs_size: Option<Text>,
    pull: Option<String>,
    timeout: Option<u64>,
    max_output_bytes: Option<usize>,
    check: Option<bool>,
    require_digest: Option<bool>,
    /// Hardening a local engine may not apply that the operator accepts: only `limits`.
    #[serde(default)]
    accept_weakened: Vec<String>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    commands: BTreeMap<String, commands::CommandEntry>,
    #[serde(default)]
    writable: Vec<String>,
    #[serde(default)]
    hidden: Vec<String>,
    egress: Option<EgressTable>,
    #[serde(default)]
    secrets: BTreeMap<String, routes::SecretSource>,
    #[serde(default)]
    routes: BTreeMap<String, routes::RouteTable>,
    fetch: Option<FetchTable>,
    kubernetes: Option<kubernetes::KubernetesTable>,
    audit: Option<AuditTable>,
}

/// A loaded configuration: every table converted once, into the values runs use.
pub struct RunConfig {
    /// The container spec: image, engine, runtime, limits, commands.
    pub spec: ContainerSpec,
    /// Each command's network, allowlist and description, and the `[egress]` table.
    pub commands: Commands,
    /// The `[fetch]` table (the MCP server's `fetch` tool), `ca_file` resolved.
    pub fetch: Option<FetchTable>,
    /// Where runs go.
    pub target: Target,
    /// The `[audit]` table, its path resolved.
    pub audit: Option<AuditConfig>,
}

/// Where runs go: this machine's engine (the spec's), or a cluster through kubectl.
pub enum Target {
    /// The engine the spec names, on this machine.
    Local,
    /// A cluster, through kubectl.
    Cluster(Cluster),
}

/// `engine = "kubernetes"`: the checked `[kubernetes]` table, and whether the workspace claim
/// is mounted read-write (`workspace_mode = "rw"`).
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The checked `[kubernetes]` table.
    pub kubernetes: KubernetesConfig,
    /// Whether the workspace claim is mounted read-write.
    pub workspace_rw: bool,
}

impl Cluster {
    /// Whether command `name` mounts the workspace claim read-write (its own
    /// `workspace_mode`, or the top level's).
    pub fn workspace_rw_for(&self, spec: &ContainerSpec, name: &str) -> bool {
        self.kubernetes.settings.workspace_claim.is_some()
            && spec.for_command(name).workspace_mode() == WorkspaceMode::ReadWrite
    }
}

impl RunConfig {
    /// The cluster, when runs go to one.
    pub fn cluster(&self) -> Option<&Cluster> {
        match &self.target {
            Target::Cluster(cluster) => Some(cluster),
            Target::Local => None,
        }
    }

    /// Refuses a Kubernetes config for `what` (a local run or server): runs on a cluster go
    /// through kubectl, never through the local engine the spec names.
    pub fn local_only(&self, what: &str) -> anyhow::Result<()> {
        if self.cluster().is_some() {
            return Err(ConfigError::Invalid(KeyError::new(
                "engine",
                format!(
                    "\"kubernetes\": {what} does not serve a cluster yet; `agentguard run` and `agentguard mcp` run commands there and `agentguard k8s manifests` prints what a run would apply. Nothing was started."
                ),
            ))
            .into());
        }
        Ok(())
    }
}

/// The `[audit]` table: where runs are recorded, and the variable holding the HMAC key.
pub struct AuditConfig {
    /// The log, resolved against the config's folder.
    pub path: PathBuf,
    /// The environment variable holding the HMAC key.
    pub key_env: Option<String>,
}

/// Parses the text of the file at `path`, without building anything yet.
fn parse(text: &str, path: &Path) -> Result<File, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: hint::with_hint(e.to_string().trim_end().to_owned()),
    })
}

/// The JSON Schema (draft 2020-12) of the config file, derived from the loader's own tables
/// (so a key the loader reads is a key the schema names): `agentguard config schema`.
pub fn schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(File);
    schema.insert("title".into(), "agentguard.toml".into());
    schema.to_value()
}

/// The configuration in the file at `path`.
pub fn load(path: &Path) -> anyhow::Result<RunConfig> {
    from_text(&read(path)?, path)
}

/// The text of the config file at `path` (for a caller that also edits it, as `policy
/// suggest --write` does); a missing file says how to give or make one.
pub fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ConfigError::Missing {
            path: path.to_owned(),
        },
        _ => ConfigError::Read {
            path: path.to_owned(),
            source,
        },
    })
}

/// `p` as written in a config whose relative paths are relative to `base`.
fn relative_to(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// The configuration in `text`, read from `path` (relative paths are relative to it); its
/// `config_sha256` is the SHA-256 of `text`'s bytes.
pub fn from_text(text: &str, path: &Path) -> anyhow::Result<RunConfig> {
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let digest = agentguard_audit::sha256_hex(text.as_bytes());
    from_file(parse(text, path)?, path, base, digest)
}

/// The configuration of a parsed `file`, named `path` in errors, its relative paths relative
/// to `base`.
pub(crate) fn from_file(
    mut file: File,
    path: &Path,
    base: &Path,
    config_sha256: String,
) -> anyhow::Result<RunConfig> {
    let resolve = |p: &Path| relative_to(base, p);
    let in_file = |source| ConfigError::Spec {
        path: path.to_owned(),
        source,
    };
    let parse_error = |error: KeyError| ConfigError::Key {
        path: path.to_owned(),
        error,
    };
    let on_cluster = file.engine.as_deref() == Some(kubernetes::ENGINE);
    let kubernetes = kubernetes::check_weakened(&file.accept_weakened, on_cluster)
        .and_then(|()| kubernetes::from_file(on_cluster, file.kubernetes.take()))
        .map_err(parse_error)?;
    let engine = local_engine(file.engine.as_deref(), on_cluster, path)?;
    let mode = match &file.workspace_mode {
        Some(m) => WorkspaceMode::parse(m).map_err(in_file)?,
        None => WorkspaceMode::ReadOnly,
    };
    let claim = kubernetes
        .as_ref()
        .is_some_and(|k| k.settings.workspace_claim.is_some());
    let workspace_rw = claim && mode == WorkspaceMode::ReadWrite;
    let mut builder = ContainerSpec::builder(&file.image);
    if let Some(engine) = engine {
        builder = builder.engine(engine);
    }
    if file.workspace.as_deref() == Some(Path::new("")) {
        return Err(parse_error(KeyError::new(
            "workspace",
            "\"\" names no folder (it would mount the config's own folder); name the workspace folder, or remove the key for no workspace",
        ))
        .into());
    }
    let workspace = file.workspace.as_deref().map(resolve);
    builder = workspace::mounted(builder, workspace, mode, claim, file.user.as_deref())?;
    let audit = file.audit.as_ref().map(|a| AuditConfig {
        path: resolve(&a.path),
        key_env: a.key_env.clone(),
    });
    let mut commands = egress::commands(&mut file, on_cluster, resolve).map_err(parse_error)?;
    floor::check(&commands).map_err(parse_error)?;
    commands.config_sha256 = config_sha256;
    let fetch = file.fetch.take().map(|mut fetch| {
        fetch.ca_file = fetch.ca_file.as_deref().map(resolve);
        fetch
    });
    if let Some(fetch) = &fetch {
        policy::check_ports("[fetch] allow_ports", fetch.allow_ports.as_deref())
            .map_err(parse_error)?;
    }
    let has_workspace = file.workspace.is_some() || claim;
    for (name, entry) in &file.commands {
        if let Some(own) = entry.settings(name).map_err(in_file)? {
            builder = builder.command_settings(name.clone(), own);
        }
    }
    let spec = settings(builder, file).build().map_err(in_file)?;
    target::check(on_cluster, &commands, &spec, path)?;
    params::check_paths(&spec, has_workspace, on_cluster).map_err(parse_error)?;
    let target = match kubernetes {
        Some(kubernetes) => Target::Cluster(Cluster {
            kubernetes,
            workspace_rw,
        }),
        None => Target::Local,
    };
    Ok(RunConfig {
        spec,
        commands,
        fetch,
        target,
        audit,
    })
}

/// The engine of a local target (`engine`, or the one found on PATH: none there is the
/// engine's own error, not the file's); none on a cluster, whose engine CLI is kubectl.
fn local_engine(
    engine: Option<&str>,
    on_cluster: bool,
    path: &Path,
) -> anyhow::Result<Option<Engine>> {
    match engine {
        Some(_) if on_cluster => Ok(None),
        Some(e) => Engine::parse(e).map(Some).map_err(|source| {
            ConfigError::Spec {
                path: path.to_owned(),
                source,
            }
            .into()
        }),
        None => Ok(Some(Engine::detect()?)),
    }
}

/// The commands, environment and limits: each passed to the builder, which parses it.
fn settings(mut builder: ContainerSpecBuilder, file: File) -> ContainerSpecBuilder {
    builder = builder.writable(file.writable).hidden(file.hidden);
    for (name, entry) in file.commands {
        let (argv, params) = entry.into_parts();
        builder = builder.command_with_params(name, argv, params);
    }
    let text = |t: Option<Text>| t.map(Text::into_string);
    if let Some(runtime) = &file.runtime {
        builder = builder.runtime(runtime);
    }
    if let Some(memory) = text(file.memory) {
        builder = builder.memory(&memory);
    }
    if let Some(cpus) = text(file.cpus) {
        builder = builder.cpus(&cpus);
    }
    if let Some(size) = text(file.tmpfs_size) {
        builder = builder.tmpfs_size(&size);
    }
    if let Some(pull) = &file.pull {
        builder = builder.pull(pull);
    }
    if let Some(pids) = file.pids {
        builder = builder.pids(pids);
    }
    if let Some(timeout) = file.timeout {
        builder = builder.timeout(Duration::from_secs(timeout));
    }
    if let Some(max) = file.max_output_bytes {
        builder = builder.max_output_bytes(max);
    }
    if let Some(check) = file.check {
        builder = builder.check(check);
    }
    if let Some(require) = file.require_digest {
        builder = builder.require_digest(require);
    }
    builder = builder.accept_weakened_limits(file.accept_weakened.iter().any(|w| w == "limits"));
    for (key, value) in file.environment {
        builder = builder.env(key, value);
    }
    builder
}

#[cfg(test)]
mod tests;

//! The `agentguard run` configuration file: TOML with the seed's names, loaded strictly.
//!
//! Unknown keys are errors that name the key and its line; relative paths are relative to the
//! config file; every value is then validated by the container crate, whose errors name the
//! field and the value. The `[audit]` table names the audit log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentguard_container::{ContainerSpec, Engine, WorkspaceMode};
use anyhow::{Context, bail};
use serde::Deserialize;

/// A number or a string (`cpus = 1`, `cpus = "1.5"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Text {
    Int(i64),
    Float(f64),
    Str(String),
}

impl Text {
    fn into_string(self) -> String {
        match self {
            Text::Int(i) => i.to_string(),
            Text::Float(f) => f.to_string(),
            Text::Str(s) => s,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditTable {
    path: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
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
    #[serde(default)]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    commands: BTreeMap<String, Vec<String>>,
    audit: Option<AuditTable>,
}

/// A loaded configuration.
pub(crate) struct RunConfig {
    pub(crate) spec: ContainerSpec,
    pub(crate) audit: Option<PathBuf>,
}

/// Picks docker if it is on PATH, else podman.
fn detect_engine() -> anyhow::Result<Engine> {
    Engine::installed().into_iter().next().ok_or_else(|| {
        anyhow::anyhow!("no container engine found on PATH: install docker or podman, or set `engine` in the config file to its path")
    })
}

/// The uid and gid of this process, from /proc (no unsafe code).
fn own_ids() -> anyhow::Result<(u32, u32)> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let field = |name: &str| -> Option<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    match (field("Uid:"), field("Gid:")) {
        (Some(u), Some(g)) => Ok((u, g)),
        _ => bail!("cannot read this process's uid and gid from /proc/self/status"),
    }
}

/// The rw-workspace rule: the invoking user's uid:gid; when that is root, the workspace
/// owner's if that is not root; otherwise refuse. Never root.
fn rw_user(workspace: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let (uid, gid) = own_ids()?;
    if uid != 0 && gid != 0 {
        return Ok(format!("{uid}:{gid}"));
    }
    let meta = std::fs::metadata(workspace)
        .with_context(|| format!("reading the owner of {}", workspace.display()))?;
    if meta.uid() != 0 && meta.gid() != 0 {
        return Ok(format!("{}:{}", meta.uid(), meta.gid()));
    }
    bail!(
        "workspace_mode = \"rw\" would run the container as root: agentguard runs as root and {} is owned by root; chown the workspace to an unprivileged user, or use workspace_mode = \"ro\"",
        workspace.display()
    )
}

pub(crate) fn load(path: &Path) -> anyhow::Result<RunConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the config file {}", path.display()))?;
    let file: File = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let resolve = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };

    let engine = match &file.engine {
        Some(e) => Engine::parse(e)?,
        None => detect_engine()?,
    };
    let mut builder = ContainerSpec::builder(file.image).engine(engine);
    for (name, argv) in file.commands {
        builder = builder.command(name, argv);
    }
    if let Some(runtime) = file.runtime {
        builder = builder.runtime(runtime);
    }
    let mode = match &file.workspace_mode {
        Some(m) => WorkspaceMode::parse(m)?,
        None => WorkspaceMode::ReadOnly,
    };
    let mut rw_owner = None;
    if let Some(ws) = &file.workspace {
        let ws = resolve(ws);
        let ws = ws.canonicalize().with_context(|| {
            format!(
                "workspace {} (relative paths are relative to the config file)",
                ws.display()
            )
        })?;
        if !ws.is_dir() {
            bail!("workspace {} is not a directory", ws.display());
        }
        if mode == WorkspaceMode::ReadWrite {
            rw_owner = Some(rw_user(&ws)?);
        }
        builder = builder.workspace(ws).workspace_mode(mode);
    } else if mode == WorkspaceMode::ReadWrite {
        bail!("workspace_mode = \"rw\" needs a `workspace`");
    }
    if let Some(network) = file.network {
        builder = builder.network(network);
    }
    match (rw_owner, file.user) {
        // A writable workspace stays writable by its owner: the rw rule wins over `user`.
        (Some(owner), _) => builder = builder.user(owner),
        (None, Some(user)) => builder = builder.user(user),
        (None, None) => {}
    }
    if let Some(memory) = file.memory {
        builder = builder.memory(memory.into_string());
    }
    if let Some(cpus) = file.cpus {
        builder = builder.cpus(cpus.into_string());
    }
    if let Some(pids) = file.pids {
        builder = builder.pids(pids);
    }
    if let Some(size) = file.tmpfs_size {
        builder = builder.tmpfs_size(size.into_string());
    }
    if let Some(pull) = file.pull {
        builder = builder.pull(pull);
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
    for (key, value) in file.environment {
        builder = builder.env(key, value);
    }
    let spec = builder
        .build()
        .with_context(|| format!("in {}", path.display()))?;
    Ok(RunConfig {
        spec,
        audit: file.audit.map(|a| resolve(&a.path)),
    })
}

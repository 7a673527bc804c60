//! A command's effective spec: [`ContainerSpec::for_command`] puts its own values
//! (`settings.rs`) over the spec's, the one value every step of its run reads (the argv, the
//! executor's deadline and cap, a cluster's Job, an agent's tool description), so a key set
//! per command is honoured by each front end without any of them knowing it; and what `build`
//! checks of the spec and of every command's effective spec.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Result, invalid};
use crate::settings::CommandSettings;
use crate::spec::{ContainerSpec, WorkspaceMode};
use crate::values::UserIds;

impl ContainerSpec {
    /// The spec as command `name` runs: its own values over the spec's, its writable and
    /// hidden paths added to the spec's, and, when its workspace is writable (or it has
    /// writable paths), the workspace owner as its user.
    pub fn for_command(&self, name: &str) -> Cow<'_, ContainerSpec> {
        let Some(own) = self.per_command.get(name) else {
            return Cow::Borrowed(self);
        };
        let mut spec = self.clone();
        spec.per_command = BTreeMap::new();
        set(&mut spec.workspace_mode, own.workspace_mode);
        set(&mut spec.timeout, own.timeout);
        set(&mut spec.max_output_bytes, own.max_output_bytes);
        set(&mut spec.memory, own.memory);
        set(&mut spec.cpus, own.cpus);
        set(&mut spec.pids, own.pids);
        set(&mut spec.tmpfs_size, own.tmpfs_size);
        spec.environment.extend(own.environment.clone());
        spec.writable.extend(own.writable.iter().cloned());
        spec.hidden.extend(own.hidden.iter().cloned());
        if spec.writes_workspace()
            && let Some(owner) = self.rw_owner
        {
            spec.user = owner;
        }
        Cow::Owned(spec)
    }

    /// True when this spec writes to the workspace: read-write, or with writable paths.
    pub fn writes_workspace(&self) -> bool {
        self.workspace.is_some()
            && (self.workspace_mode == WorkspaceMode::ReadWrite || !self.writable.is_empty())
    }

    /// The workspace mode (also without a workspace folder, as on a cluster's claim).
    pub fn workspace_mode(&self) -> WorkspaceMode {
        self.workspace_mode
    }

    /// The writable paths (workspace-relative folders mounted read-write).
    pub fn writable(&self) -> &[String] {
        &self.writable
    }

    /// The hidden patterns (gitignore-style, relative to the workspace).
    pub fn hidden(&self) -> &[String] {
        &self.hidden
    }

    /// The longest time limit of any command: what a run's deadline label must allow before
    /// `gc` may take its container for one a crashed run left.
    pub fn longest_timeout(&self) -> Duration {
        self.per_command
            .values()
            .filter_map(|s| s.timeout)
            .fold(self.timeout, Duration::max)
    }

    /// The commands that set values of their own.
    pub fn command_settings(&self) -> &BTreeMap<String, CommandSettings> {
        &self.per_command
    }
}

/// `slot` set to `value`, when there is one.
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

/// What `build` checks of the commands' own values and of the workspace paths: each command's
/// effective values as the spec's own (errors naming `commands.NAME.KEY`); `writable` and
/// `hidden` only with a workspace; a writable path a real folder with no symlink along it,
/// none inside another, never beside a writable workspace (a command writing anywhere could
/// swap a writable path for a link to a host folder between the check and the engine's
/// mount); the owner a writing command runs as.
pub(crate) fn check_commands(spec: &mut ContainerSpec) -> Result<()> {
    for name in spec.per_command.keys() {
        if spec.commands.get(name).is_err() {
            return Err(invalid(
                "commands",
                name.clone(),
                "settings are given for a command that is not on the allowlist",
            ));
        }
        check_limits(&spec.for_command(name)).map_err(|e| e.in_command(name))?;
    }
    let names: Vec<String> = spec.per_command.keys().cloned().collect();
    let effective: Vec<(Option<&str>, Cow<'_, ContainerSpec>)> =
        std::iter::once((None, Cow::Borrowed(&*spec)))
            .chain(
                names
                    .iter()
                    .map(|n| (Some(n.as_str()), spec.for_command(n))),
            )
            .collect();
    let mut rw_command: Option<&str> = None;
    let mut all_writable: Vec<&str> = Vec::new();
    for (command, own) in &effective {
        check_paths(*command, own)?;
        if own.workspace_mode == WorkspaceMode::ReadWrite {
            rw_command.get_or_insert(command.unwrap_or("(top level)"));
        }
        for entry in &own.writable {
            if !all_writable.contains(&entry.as_str()) {
                all_writable.push(entry);
            }
        }
    }
    check_together(rw_command, &all_writable)?;
    let writes = effective.iter().any(|(_, e)| e.writes_workspace());
    drop(effective);
    if spec.rw_owner.is_none() {
        if spec.writes_workspace() {
            // The spec's own user already is the owner (the loader's rw rule, or the caller's).
            spec.rw_owner = Some(spec.user);
        } else if writes && let Some(root) = spec.workspace.clone() {
            spec.rw_owner = Some(UserIds::for_rw_workspace(&root)?);
        }
    }
    Ok(())
}

/// `field`'s value refused, named for `command` (or the top level).
fn refused(command: Option<&str>, field: &'static str, value: String, why: String) -> crate::Error {
    let error = invalid(field, value, why);
    match command {
        Some(name) => error.in_command(name),
        None => error,
    }
}

/// One effective spec's paths: `writable` not with a writable workspace, both only with a
/// workspace, patterns that compile, writable folders that are real.
fn check_paths(command: Option<&str>, own: &ContainerSpec) -> Result<()> {
    let writable = &own.writable;
    if own.workspace_mode == WorkspaceMode::ReadWrite && !writable.is_empty() {
        let why = "workspace_mode = \"rw\" makes the whole workspace writable already; remove `writable` or set workspace_mode = \"ro\"";
        return Err(refused(
            command,
            "writable",
            writable.join(", "),
            why.into(),
        ));
    }
    if own.workspace.is_none() && (!writable.is_empty() || !own.hidden.is_empty()) {
        let why = "`writable` and `hidden` are workspace paths: set `workspace`";
        return Err(refused(
            command,
            "writable",
            writable.join(", "),
            why.into(),
        ));
    }
    crate::masks::check_patterns(&own.hidden)
        .map_err(|e| refused(command, "hidden", own.hidden.join(", "), e.to_string()))?;
    if let Some(root) = &own.workspace {
        for entry in writable {
            crate::masks::check_writable(root, entry)
                .map_err(|why| refused(command, "writable", entry.clone(), why))?;
        }
    }
    Ok(())
}

/// Across every command: no writable path inside another, none beside a writable workspace.
fn check_together(rw_command: Option<&str>, all_writable: &[&str]) -> Result<()> {
    crate::masks::check_nesting(all_writable).map_err(|(inner, outer)| {
        invalid("writable", inner, format!("it lies inside the writable path {outer:?}: a command writing there could swap it for a link before its mount; list only the outer one"))
    })?;
    if let (Some(command), false) = (rw_command, all_writable.is_empty()) {
        return Err(invalid(
            "writable",
            all_writable.join(", "),
            format!(
                "the command {command} has workspace_mode = \"rw\": it could replace a writable path by a link to a host folder between agentguard's check and the engine's mount. Give that command `writable` paths instead of a writable workspace"
            ),
        ));
    }
    Ok(())
}

/// The values that must hold for the spec and for each command's effective spec.
pub(crate) fn check_limits(spec: &ContainerSpec) -> Result<()> {
    for (field, zero) in [
        ("pids", spec.pids == 0),
        ("nofile", spec.nofile == 0),
        ("nproc", spec.nproc == 0),
        ("timeout", spec.timeout.is_zero()),
        ("max_output_bytes", spec.max_output_bytes == 0),
    ] {
        if zero {
            return Err(invalid(field, "0", "the limit must be positive"));
        }
    }
    if spec.timeout > MAX_TIMEOUT {
        return Err(invalid(
            "timeout",
            spec.timeout.as_secs().to_string(),
            format!(
                "at most {} seconds (7 days); no run may outlive the deadline labels gc relies on",
                MAX_TIMEOUT.as_secs()
            ),
        ));
    }
    for (key, value) in &spec.environment {
        validate_env(key, value)?;
    }
    Ok(())
}

/// The longest `timeout` a spec accepts: 7 days.
pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

pub(crate) fn validate_env(key: &str, value: &str) -> Result<()> {
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
    if crate::spec::PROXY_VARIABLES.contains(&key) {
        return Err(invalid(
            "environment",
            key,
            "the proxy variables are agentguard's: a `network = \"egress\"` run points them at its relay, and a `network = \"none\"` run has nowhere to send them; remove the entry",
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

#[cfg(test)]
mod tests;

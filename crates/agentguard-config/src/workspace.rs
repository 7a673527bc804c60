//! The workspace folder, its mode and the user a run is made as: a writable workspace stays
//! writable by its owner, never root.

use std::path::PathBuf;

use agentguard_container::{ContainerSpecBuilder, UserIds, WorkspaceMode};

use crate::error::{ConfigError, KeyError};

/// The workspace folder and mode, and the user: a writable workspace stays writable by its
/// owner (the rw rule wins over `user`); `rw` needs a folder, or a cluster's claim.
pub(crate) fn mounted(
    mut builder: ContainerSpecBuilder,
    workspace: Option<PathBuf>,
    mode: WorkspaceMode,
    claim: bool,
    user: Option<&str>,
) -> anyhow::Result<ContainerSpecBuilder> {
    match (workspace, mode) {
        (Some(ws), _) => {
            let (ws, rw_owner) = self::workspace(ws, mode)?;
            builder = builder.workspace(ws).workspace_mode(mode);
            match (rw_owner, user) {
                (Some(owner), _) => builder = builder.user_ids(owner),
                (None, Some(user)) => builder = builder.user(user),
                (None, None) => {}
            }
        }
        (None, WorkspaceMode::ReadWrite) if claim => {}
        (None, WorkspaceMode::ReadWrite) => {
            return Err(ConfigError::Invalid(KeyError::new(
                "workspace_mode",
                "\"rw\" needs a `workspace`",
            ))
            .into());
        }
        (None, WorkspaceMode::ReadOnly) => {
            if let Some(user) = user {
                builder = builder.user(user);
            }
        }
    }
    Ok(builder)
}

/// The canonical workspace folder, and the user a read-write one is used as.
fn workspace(path: PathBuf, mode: WorkspaceMode) -> anyhow::Result<(PathBuf, Option<UserIds>)> {
    let ws = path
        .canonicalize()
        .map_err(|source| ConfigError::Workspace { path, source })?;
    if !ws.is_dir() {
        return Err(ConfigError::Invalid(KeyError::new(
            "workspace",
            format!("{} is not a directory", ws.display()),
        ))
        .into());
    }
    let owner = match mode {
        WorkspaceMode::ReadWrite => Some(UserIds::for_rw_workspace(&ws)?),
        WorkspaceMode::ReadOnly => None,
    };
    Ok((ws, owner))
}

//! The folder of each `network = "egress"` run: `RUNS/<container name>/`, mode 0700, holding
//! the relay copy (`relay`), the proxy's socket (`proxy.sock`) and the owner's pid and start
//! time (`owner`). The engine mounts the two files themselves, never the folder, so no other
//! host user can reach the socket while the container's user (65534) can.
//!
//! `RUNS` is checked before use: a folder owned by this user, not a symbolic link, with no
//! access for group or others (it is created so when missing). A run removes its folder when
//! it ends, however it ends; a run that was SIGKILLed leaves it, and [`sweep`] (`agentguard
//! gc`, and every egress run's start) removes the folders whose owner is gone.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agentguard_container::Masks;
use agentguard_container::gc::{owner_gone, this_owner};

use crate::error::{Error, Result};

/// The relay's file name in a run folder.
pub const RELAY_FILE: &str = "relay";
/// The proxy socket's file name in a run folder.
pub const SOCKET_FILE: &str = "proxy.sock";
const OWNER_FILE: &str = "owner";
/// The empty file and folder hidden paths are masked with.
const MASK_FILE: &str = "empty";
const MASK_DIR: &str = "empty.d";
const PREFIX: &str = "agentguard-";

/// `$XDG_RUNTIME_DIR/agentguard` when that is set, else `/tmp/agentguard-<uid>`.
pub fn default_runs_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("agentguard"),
        None => PathBuf::from(format!("/tmp/agentguard-{}", effective_uid().unwrap_or(0))),
    }
}

/// The effective uid: the owner of `/proc/self` (no unsafe code).
fn effective_uid() -> std::io::Result<u32> {
    Ok(std::fs::metadata("/proc/self")?.uid())
}

/// Creates `runs` (mode 0700) if it is missing, and checks that it is safe to put sockets in.
pub(crate) fn prepare(runs: &Path) -> Result<()> {
    let fail = |action: &'static str, source: std::io::Error| Error::RunDir {
        path: runs.to_owned(),
        action,
        source,
    };
    match std::fs::DirBuilder::new().mode(0o700).create(runs) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail("creating the runs folder", e)),
    }
    let meta = std::fs::symlink_metadata(runs).map_err(|e| fail("reading the runs folder", e))?;
    let uid = effective_uid().map_err(|e| fail("reading this process's uid", e))?;
    let unsafe_because = if !meta.file_type().is_dir() {
        Some("it is not a folder (or is a symbolic link)".to_owned())
    } else if meta.uid() != uid {
        Some(format!(
            "it is owned by uid {}, not by this user ({uid})",
            meta.uid()
        ))
    } else if meta.permissions().mode() & 0o077 != 0 {
        Some(format!(
            "its mode is {:o}: group or others have access",
            meta.permissions().mode() & 0o777
        ))
    } else {
        None
    };
    match unsafe_because {
        Some(why) => Err(Error::RunsDirUnsafe {
            path: runs.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// One run's folder; removed with everything in it when dropped.
#[derive(Debug)]
pub(crate) struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates `runs/name` (mode 0700; it must not exist) and records its owner.
    pub(crate) fn create(runs: &Path, name: &str) -> Result<RunDir> {
        let path = runs.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|source| Error::RunDir {
                path: path.clone(),
                action: "creating the run folder",
                source,
            })?;
        let dir = RunDir { path };
        let (pid, start) = this_owner();
        std::fs::write(dir.path.join(OWNER_FILE), format!("{pid} {start}\n")).map_err(
            |source| Error::RunDir {
                path: dir.path.clone(),
                action: "recording the run's owner",
                source,
            },
        )?;
        Ok(dir)
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// An empty read-only file and folder in this run's folder, which the engine mounts over
    /// every hidden workspace path (the container's user reads them through the mounts, never
    /// through this 0700 folder).
    pub(crate) fn masks(&self) -> Result<Masks> {
        let fail = |action: &'static str, source: std::io::Error| Error::RunDir {
            path: self.path.clone(),
            action,
            source,
        };
        let (file, dir) = mask_sources(&self.path);
        std::fs::write(&file, b"").map_err(|e| fail("creating the empty mask file", e))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444))
            .map_err(|e| fail("making the mask file read-only", e))?;
        std::fs::DirBuilder::new()
            .mode(0o555)
            .create(&dir)
            .map_err(|e| fail("creating the empty mask folder", e))?;
        Ok(Masks {
            file,
            dir,
            paths: Vec::new(),
        })
    }
}

/// Where a run folder's empty mask file and folder are.
pub(crate) fn mask_sources(run: &Path) -> (PathBuf, PathBuf) {
    (run.join(MASK_FILE), run.join(MASK_DIR))
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "removing the run folder failed");
        }
    }
}

/// A run folder whose owner is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleRun {
    /// The folder.
    pub path: PathBuf,
    /// Why it is stale.
    pub why: String,
}

/// Finds (and unless `dry_run`, removes) the run folders in `runs` whose owner is gone. A
/// missing `runs` has none.
pub fn sweep(runs: &Path, dry_run: bool) -> std::io::Result<Vec<StaleRun>> {
    let entries = match std::fs::read_dir(runs) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut stale = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        // The container name is `agentguard-PID-...`; the owner file adds the start time.
        let pid = rest.split('-').next().unwrap_or_default();
        let owner = std::fs::read_to_string(entry.path().join(OWNER_FILE)).unwrap_or_default();
        let start = owner
            .split_whitespace()
            .nth(1)
            .filter(|_| owner.split_whitespace().next() == Some(pid))
            .unwrap_or_default();
        if let Some(why) = owner_gone(pid, start) {
            if !dry_run {
                std::fs::remove_dir_all(entry.path())?;
            }
            stale.push(StaleRun {
                path: entry.path(),
                why,
            });
        }
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::{RunDir, prepare, sweep};

    #[test]
    fn a_run_folder_is_private_and_removed_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let runs = tmp.path().join("runs");
        prepare(&runs).unwrap();
        let mode = std::fs::metadata(&runs).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let name = format!("agentguard-{}-1-0", std::process::id());
        let dir = RunDir::create(&runs, &name).unwrap();
        let path = runs.join(&name);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(
            RunDir::create(&runs, &name).is_err(),
            "an existing folder is never reused"
        );
        // Our own folder is not stale.
        assert_eq!(sweep(&runs, false).unwrap(), Vec::new());
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn an_open_runs_folder_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let runs = tmp.path().join("open");
        std::fs::create_dir(&runs).unwrap();
        std::fs::set_permissions(&runs, std::fs::Permissions::from_mode(0o755)).unwrap();
        let message = prepare(&runs).unwrap_err().to_string();
        assert!(message.contains("mode is 755"), "{message}");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
        let message = prepare(&link).unwrap_err().to_string();
        assert!(message.contains("symbolic link"), "{message}");
    }

    #[test]
    fn folders_of_gone_owners_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let runs = tmp.path().join("runs");
        prepare(&runs).unwrap();
        // A pid that cannot exist, and our own pid with another start time (a reused pid).
        let gone = runs.join(format!("agentguard-{}-1-0", u32::MAX - 1));
        std::fs::create_dir(&gone).unwrap();
        let reused = runs.join(format!("agentguard-{}-2-0", std::process::id()));
        std::fs::create_dir(&reused).unwrap();
        std::fs::write(reused.join("owner"), format!("{} 1\n", std::process::id())).unwrap();
        let other = runs.join("not-ours");
        std::fs::create_dir(&other).unwrap();
        let found = sweep(&runs, true).unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(gone.exists(), "a dry run removes nothing");
        let removed = sweep(&runs, false).unwrap();
        assert_eq!(removed.len(), 2);
        assert!(!gone.exists() && !reused.exists() && other.exists());
    }
}

//! The image cache of `engine = "oci"`: one root file system per image ID, unpacked once,
//! never written by a run (the runtime mounts it read-only), reused by every later run.
//!
//! Layout: `CACHE/images/<id>/rootfs` and `CACHE/images/<id>/image.json` (what a run takes
//! from the image: its environment, and the layers it was verified against). An entry is made
//! in a private folder beside `images/` and renamed into place whole, `image.json` last
//! inside it, so a reader sees a complete entry or none. The cache folder is root's, mode
//! 0700; one with other owners or permissions is refused, never used.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where the cache is unless `AGENTGUARD_OCI_CACHE` says otherwise.
pub const DEFAULT_CACHE: &str = "/var/lib/agentguard/oci";
/// The variable that moves the cache.
pub const CACHE_VARIABLE: &str = "AGENTGUARD_OCI_CACHE";
/// The mount points a run needs in every root file system: folders, then files.
const MOUNT_FOLDERS: &[&str] = &["proc", "sys", "dev", "tmp", "workspace", "run/agentguard"];
const MOUNT_FILES: &[&str] = &["run/agentguard/relay", "run/agentguard/proxy.sock"];

/// The cache folder in force.
pub fn cache_root() -> PathBuf {
    std::env::var_os(CACHE_VARIABLE)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_CACHE), PathBuf::from)
}

/// One cached image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// `CACHE/images/<id>`.
    pub(crate) dir: PathBuf,
    /// The image's environment (`KEY=VALUE`).
    pub(crate) env: Vec<String>,
}

impl Entry {
    /// The root file system.
    pub(crate) fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
}

/// The cache's folders, made if missing (0700), and checked: a folder, not a link, owned by
/// this user, no access for anyone else.
pub(crate) fn open(root: &Path) -> Result<PathBuf, String> {
    let images = root.join("images");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&images)
        .map_err(|e| format!("making the cache {}: {e}", images.display()))?;
    let uid = crate::values::own_ids().map_or(u32::MAX, |(uid, _)| uid);
    for dir in [root, images.as_path()] {
        let meta = std::fs::symlink_metadata(dir)
            .map_err(|e| format!("reading the cache {}: {e}", dir.display()))?;
        let mode = meta.permissions().mode() & 0o777;
        if !meta.is_dir() || meta.uid() != uid || mode & 0o077 != 0 {
            return Err(format!(
                "the cache folder {} must be a folder owned by uid {uid} with mode 0700 (it is {}, uid {}, mode {mode:o}); fix it or set {CACHE_VARIABLE}",
                dir.display(),
                if meta.file_type().is_symlink() {
                    "a link"
                } else if meta.is_dir() {
                    "a folder"
                } else {
                    "a file"
                },
                meta.uid()
            ));
        }
    }
    Ok(images)
}

/// The entry of image `id` (bare hex), if the cache holds a complete one.
pub(crate) fn lookup(images: &Path, id: &str) -> Option<Entry> {
    let meta = meta(images, id)?;
    meta["env"].as_array()?;
    let env = strings(&meta["env"]);
    Some(Entry {
        dir: images.join(id),
        env,
    })
}

/// The `image.json` of entry `id`, when it has a readable one.
fn meta(images: &Path, id: &str) -> Option<Value> {
    let text = std::fs::read_to_string(images.join(id).join("image.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// The strings of a JSON array (none when it is not one).
pub(crate) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// The layout directory an entry was unpacked from (`oci:PATH`), when it was.
pub(crate) fn layout_of(images: &Path, id: &str) -> Option<PathBuf> {
    meta(images, id)?["source"]
        .as_str()?
        .strip_prefix("oci:")
        .map(PathBuf::from)
}

/// A folder an entry is built in, removed on drop unless it was put in place.
pub(crate) struct Building {
    pub(crate) dir: PathBuf,
    placed: bool,
}

impl Building {
    /// A fresh private folder beside `images/` for image `id`.
    pub(crate) fn start(images: &Path, id: &str) -> Result<Building, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            ".building-{id}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let dir = images.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("making {}: {e}", dir.display()))?;
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(dir.join("rootfs"))
            .map_err(|e| format!("making {}/rootfs: {e}", dir.display()))?;
        Ok(Building { dir, placed: false })
    }

    /// Makes the mount points, writes `image.json`, and renames the folder to `images/<id>`;
    /// when another process put the same image in place first, its entry is used.
    pub(crate) fn finish(
        mut self,
        images: &Path,
        id: &str,
        env: Vec<String>,
        layers: &[String],
        source: Option<&str>,
    ) -> Result<Entry, String> {
        let rootfs = self.dir.join("rootfs");
        for folder in MOUNT_FOLDERS {
            super::unpack::make_inside(&rootfs, folder, false)?;
        }
        for file in MOUNT_FILES {
            super::unpack::make_inside(&rootfs, file, true)?;
        }
        let mut meta =
            serde_json::json!({"id": format!("sha256:{id}"), "env": env, "layers": layers});
        if let Some(source) = source {
            meta["source"] = source.into();
        }
        std::fs::write(self.dir.join("image.json"), meta.to_string())
            .map_err(|e| format!("writing image.json: {e}"))?;
        let target = images.join(id);
        match std::fs::rename(&self.dir, &target) {
            Ok(()) => self.placed = true,
            Err(_) if lookup(images, id).is_some() => {}
            Err(e) => return Err(format!("putting {} in place: {e}", target.display())),
        }
        Ok(Entry { dir: target, env })
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_complete_or_absent_and_a_shared_cache_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let images = open(&root).unwrap();
        let id = "ab".repeat(32);
        assert_eq!(lookup(&images, &id), None);
        let building = Building::start(&images, &id).unwrap();
        let temporary = building.dir.clone();
        let entry = building
            .finish(&images, &id, vec!["PATH=/bin".into()], &[], None)
            .unwrap();
        assert!(!temporary.exists());
        assert_eq!(lookup(&images, &id), Some(entry.clone()));
        assert!(entry.rootfs().join("run/agentguard/relay").is_file());
        assert!(entry.rootfs().join("workspace").is_dir());
        // A second build of the same image finds the first in place and is removed.
        let again = Building::start(&images, &id).unwrap();
        let second = again.dir.clone();
        again.finish(&images, &id, Vec::new(), &[], None).unwrap();
        assert!(!second.exists());
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let error = open(&root).unwrap_err();
        assert!(error.contains("mode 755"), "{error}");
    }
}

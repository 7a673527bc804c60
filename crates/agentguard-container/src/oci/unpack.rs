//! An image's layers applied in order to one root file system, each layer verified against
//! its digest before any of it is written; whiteouts (`.wh.NAME`, `.wh..wh..opq`) applied as
//! the image format says. Blocking file work: called off the async runtime.
//!
//! Entries are written with `tar`'s `unpack_in`, which refuses a path that would leave the
//! root (an absolute path, `..`, or a parent that resolves outside it through a link), and
//! keeps owners, modes and times (the cache is written by root). Before an entry is written,
//! whatever of another kind is at its path is removed without following a link, so a link
//! planted by a lower layer is replaced, never written through.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

/// The file that makes a folder opaque: what lower layers put in it is gone.
const OPAQUE: &str = ".wh..wh..opq";
/// The prefix of a whiteout: the named entry of a lower layer is gone.
const WHITEOUT: &str = ".wh.";

/// The lower-case hex SHA-256 of a file's bytes.
pub(crate) fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// Lower-case hex of bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Applies the layer tar at `layer` (uncompressed) to `root`, after checking that its
/// SHA-256 is `diff_id` (`sha256:<hex>`, from the image's config).
pub(crate) fn apply_layer(root: &Path, layer: &Path, diff_id: &str) -> Result<(), String> {
    let seen = sha256_file(layer).map_err(|e| format!("reading {}: {e}", layer.display()))?;
    if diff_id.strip_prefix("sha256:") != Some(seen.as_str()) {
        return Err(format!(
            "layer {} has sha256:{seen}, but the image's config says {diff_id}",
            layer.display()
        ));
    }
    let file = File::open(layer).map_err(|e| format!("opening {}: {e}", layer.display()))?;
    let mut archive = tar::Archive::new(file);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let mut written: HashSet<PathBuf> = HashSet::new();
    let entries = archive
        .entries()
        .map_err(|e| format!("reading layer {}: {e}", layer.display()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("reading layer {}: {e}", layer.display()))?;
        let raw = entry
            .path()
            .map_err(|e| format!("an entry of layer {}: {e}", layer.display()))?
            .into_owned();
        let Some(path) = normal(&raw) else {
            return Err(format!(
                "layer {} names {:?}, which leaves the root",
                layer.display(),
                raw
            ));
        };
        if path.as_os_str().is_empty() {
            continue;
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let parent = path.parent().unwrap_or(Path::new(""));
        if name == OPAQUE {
            clear(&root.join(parent), parent, &written)
                .map_err(|e| format!("making {} opaque: {e}", parent.display()))?;
        } else if let Some(gone) = name.strip_prefix(WHITEOUT) {
            remove(&root.join(parent).join(gone))
                .map_err(|e| format!("removing {}: {e}", parent.join(gone).display()))?;
        } else {
            let target = root.join(&path);
            make_way(&target, entry.header().entry_type().is_dir())
                .map_err(|e| format!("replacing {}: {e}", path.display()))?;
            entry
                .unpack_in(root)
                .map_err(|e| format!("writing {}: {}", path.display(), chain(&e)))?;
            written.insert(path);
        }
    }
    Ok(())
}

/// An error and its causes, one after another.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// The entry's path relative to the root (`./a/b` is `a/b`), or `None` for one that would
/// leave it.
fn normal(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) | Component::ParentDir => return None,
        }
    }
    Some(out)
}

/// Removes whatever is at `path` without following a link; nothing there is fine.
fn remove(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Clears the way for an entry: a folder stays for a folder; anything else at the path goes.
fn make_way(target: &Path, dir: bool) -> io::Result<()> {
    match std::fs::symlink_metadata(target) {
        Ok(meta) if meta.is_dir() && dir => Ok(()),
        Ok(_) => remove(target),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Empties the folder `dir` (`relative` inside the root) of what lower layers put there,
/// keeping what this layer already wrote.
fn clear(dir: &Path, relative: &Path, written: &HashSet<PathBuf>) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return Ok(());
    }
    for child in std::fs::read_dir(dir)? {
        let child = child?;
        let inside = relative.join(child.file_name());
        if !written.iter().any(|w| w.starts_with(&inside)) {
            remove(&child.path())?;
        }
    }
    Ok(())
}

/// Makes `relative` inside `root` as a folder (or an empty file when `file`), creating its
/// parents; refuses when any part of the way is a link, which could point out of the root.
pub(crate) fn make_inside(root: &Path, relative: &str, file: bool) -> Result<(), String> {
    let parts: Vec<&str> = relative.split('/').filter(|p| !p.is_empty()).collect();
    let mut here = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        here.push(part);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&here) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "the image's /{} is a link; engine = \"oci\" mounts over /{relative} and never follows a link there",
                    parts[..=i].join("/")
                ));
            }
            Ok(meta) if meta.is_dir() && !(last && file) => {}
            Ok(meta) if last && file && meta.is_file() => {}
            Ok(_) => {
                return Err(format!(
                    "the image has /{} where engine = \"oci\" needs a {}",
                    parts[..=i].join("/"),
                    if last && file { "file" } else { "folder" }
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let made = if last && file {
                    File::create(&here).map(drop)
                } else {
                    std::fs::create_dir(&here)
                };
                made.map_err(|e| format!("making /{}: {e}", parts[..=i].join("/")))?;
            }
            Err(e) => return Err(format!("reading /{}: {e}", parts[..=i].join("/"))),
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A layer tar `name` in `dir` of `entries` (a folder when the content is `None`); its
    /// path and digest (`sha256:<hex>`).
    pub(crate) fn layer(
        dir: &Path,
        name: &str,
        entries: &[(&str, Option<&[u8]>)],
    ) -> (PathBuf, String) {
        let path = dir.join(name);
        let mut builder = tar::Builder::new(File::create(&path).unwrap());
        for (entry, content) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_uid(0);
            header.set_gid(0);
            header.set_mtime(0);
            match content {
                Some(bytes) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_size(bytes.len() as u64);
                    header.set_mode(0o644);
                    builder.append_data(&mut header, entry, *bytes).unwrap();
                }
                None => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    header.set_mode(0o755);
                    builder
                        .append_data(&mut header, entry, io::empty())
                        .unwrap();
                }
            }
        }
        builder.finish().unwrap();
        drop(builder);
        let digest = format!("sha256:{}", sha256_file(&path).unwrap());
        (path, digest)
    }

    #[test]
    fn layers_apply_in_order_with_whiteouts_and_opaque_folders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("rootfs");
        std::fs::create_dir(&root).unwrap();
        let (one, one_id) = layer(
            dir.path(),
            "1.tar",
            &[
                ("etc/", None),
                ("etc/a", Some(b"a1")),
                ("etc/b", Some(b"b1")),
                ("opt/", None),
                ("opt/old", Some(b"o")),
            ],
        );
        let (two, two_id) = layer(
            dir.path(),
            "2.tar",
            &[
                ("etc/.wh.b", Some(b"")),
                ("etc/a", Some(b"a2")),
                ("opt/new", Some(b"n")),
                ("opt/.wh..wh..opq", Some(b"")),
            ],
        );
        apply_layer(&root, &one, &one_id).unwrap();
        apply_layer(&root, &two, &two_id).unwrap();
        assert_eq!(std::fs::read(root.join("etc/a")).unwrap(), b"a2");
        assert!(!root.join("etc/b").exists());
        assert!(
            root.join("opt/new").exists(),
            "written by the opaque layer itself"
        );
        assert!(
            !root.join("opt/old").exists(),
            "hidden by the opaque marker"
        );
        // A layer whose bytes are not its digest is refused before anything is written.
        let error = apply_layer(&root, &one, &two_id).unwrap_err();
        assert!(error.contains("the image's config says"), "{error}");
    }

    #[test]
    fn a_mount_point_is_never_made_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::os::unix::fs::symlink("/etc", root.join("run")).unwrap();
        let error = make_inside(root, "run/agentguard/relay", true).unwrap_err();
        assert!(error.contains("/run is a link"), "{error}");
        make_inside(root, "workspace", false).unwrap();
        make_inside(root, "tmp/x/file", true).unwrap();
        assert!(root.join("workspace").is_dir() && root.join("tmp/x/file").is_file());
        assert!(normal(Path::new("../x")).is_none() && normal(Path::new("/x")).is_none());
        assert_eq!(normal(Path::new("./a/b")).unwrap(), PathBuf::from("a/b"));
    }
}

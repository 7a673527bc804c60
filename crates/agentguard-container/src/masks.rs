//! The workspace's writable and hidden paths, on the host.
//!
//! A `writable` entry is a folder of the workspace mounted read-write over the read-only
//! workspace: lexically a normal relative path (policy's rules for a `path` value), then
//! walked with lstat, every component a real folder, none a symlink, checked when the spec is
//! built and again right before each run (the engine follows a symlink in a mount's source, so
//! a link planted since would mount a host folder). A `hidden` pattern is gitignore-style,
//! relative to the workspace: every match at a run's start is masked inside the container (a
//! file by an empty read-only file, a folder by an empty read-only folder), found by a walk
//! that never follows a symlink and never enters a folder it masks whole; a symlink that
//! matches is masked as itself. More than [`MAX_MASKS`] matches refuse the run, naming the
//! pattern: never a silent partial mask.

use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// The most paths one run may mask.
pub const MAX_MASKS: usize = 4096;

/// A workspace path hidden inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    /// The path relative to the workspace (UTF-8; no `,` or `"`, which `--mount` reads).
    pub path: String,
    /// A folder (masked by an empty folder) or anything else (masked by an empty file).
    pub dir: bool,
}

/// Why the hidden paths of a run could not be masked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaskError {
    /// A pattern is not a gitignore-style pattern.
    Pattern(String, String),
    /// A pattern matched more than [`MAX_MASKS`] paths.
    TooMany(String),
    /// A matched path cannot be named in a mount (not UTF-8, or holding `,` or `"`).
    Unnamed(String),
    /// The walk could not read a folder.
    Walk(String, String),
    /// A `writable` entry is no longer a real folder (re-checked before each run).
    Writable(String, String),
    /// The spec hides paths but the run was given nothing to mask them with.
    NoSources,
}

impl std::error::Error for MaskError {}

impl std::fmt::Display for MaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaskError::Pattern(p, why) => write!(f, "hidden pattern {p:?} is not a gitignore-style pattern: {why}"),
            MaskError::TooMany(p) => write!(
                f,
                "hidden pattern {p:?} matches more than {MAX_MASKS} paths; a run masks at most {MAX_MASKS}, never some of them: narrow the pattern, or hide the folder that holds them (`dir/`)"
            ),
            MaskError::Unnamed(path) => write!(
                f,
                "the hidden path {path:?} cannot be masked: its name is not UTF-8 or holds `,` or `\\\"`, which a mount cannot name; rename it, or hide its folder"
            ),
            MaskError::Walk(path, why) => write!(f, "reading {path} to find the hidden paths failed: {why}"),
            MaskError::Writable(entry, why) => write!(
                f,
                "writable path {entry:?} is no longer safe to mount: {why}; nothing was started"
            ),
            MaskError::NoSources => f.write_str(
                "the spec hides workspace paths but the run has no empty file and folder to mask them with (a Sandbox provides them); nothing was started",
            ),
        }
    }
}

/// Checks one `writable` entry below `root`: `Err(why)` when it is not a normal relative
/// path to a real folder with no symlink along it.
pub(crate) fn check_writable(root: &Path, entry: &str) -> Result<(), String> {
    let path = agentguard_policy::relative_path(entry).map_err(|(_, why)| why)?;
    if path.contains([',', '"']) {
        return Err("a `,` or `\"` cannot be named in a mount".into());
    }
    let mut at = root.to_path_buf();
    for component in path.split('/') {
        at.push(component);
        let meta = std::fs::symlink_metadata(&at)
            .map_err(|e| format!("{} cannot be read ({e}); create the folder", at.display()))?;
        if meta.file_type().is_symlink() {
            return Err(format!(
                "{} is a symlink; a writable path follows none",
                at.display()
            ));
        }
        if !meta.is_dir() {
            return Err(format!("{} is not a folder", at.display()));
        }
    }
    Ok(())
}

/// Checks that no `writable` entry lies inside another: `Err((inner, outer))`. (A command
/// writing inside the outer one could swap the inner one for a link before its mount.)
pub(crate) fn check_nesting(entries: &[&str]) -> Result<(), (String, String)> {
    for a in entries {
        for b in entries {
            let inside = a.len() > b.len() && a.starts_with(b) && a.as_bytes()[b.len()] == b'/';
            if inside {
                return Err(((*a).to_owned(), (*b).to_owned()));
            }
        }
    }
    Ok(())
}

/// The compiled patterns.
fn matcher(root: &Path, patterns: &[String]) -> Result<Gitignore, MaskError> {
    let mut builder = GitignoreBuilder::new(root);
    for pattern in patterns {
        builder
            .add_line(None, pattern)
            .map_err(|e| MaskError::Pattern(pattern.clone(), e.to_string()))?;
    }
    builder
        .build()
        .map_err(|e| MaskError::Pattern(patterns.join(" "), e.to_string()))
}

/// Checks the patterns compile (at load).
pub(crate) fn check_patterns(patterns: &[String]) -> Result<(), MaskError> {
    matcher(Path::new("/"), patterns).map(|_| ())
}

/// Every path below `root` that `patterns` match now, sorted (see the module docs).
pub fn hidden_paths(root: &Path, patterns: &[String]) -> Result<Vec<Mask>, MaskError> {
    if patterns.is_empty() {
        return Ok(Vec::new());
    }
    let matcher = matcher(root, patterns)?;
    let mut masks = Vec::new();
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = std::fs::read_dir(&folder)
            .map_err(|e| MaskError::Walk(folder.display().to_string(), e.to_string()))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| MaskError::Walk(folder.display().to_string(), e.to_string()))?;
            let path = entry.path();
            // lstat: a symlink is itself, never what it points at.
            let meta = std::fs::symlink_metadata(&path)
                .map_err(|e| MaskError::Walk(path.display().to_string(), e.to_string()))?;
            let dir = meta.is_dir();
            let relative = path.strip_prefix(root).unwrap_or(&path);
            match matcher.matched(relative, dir) {
                ignore::Match::Ignore(glob) => {
                    let pattern = glob.original().to_owned();
                    let count = counts.entry(pattern.clone()).or_default();
                    *count += 1;
                    if *count > MAX_MASKS || masks.len() >= MAX_MASKS {
                        return Err(MaskError::TooMany(pattern));
                    }
                    let name = relative
                        .to_str()
                        .filter(|n| !n.contains([',', '"', '\n']))
                        .ok_or_else(|| MaskError::Unnamed(relative.to_string_lossy().into()))?;
                    masks.push(Mask {
                        path: name.to_owned(),
                        dir,
                    });
                }
                _ if dir => folders.push(path),
                _ => {}
            }
        }
    }
    masks.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(masks)
}

/// The most entries a walk for a glob's matches reads; past it the list is what was found.
pub const MAX_GLOB_WALK: usize = 100_000;

/// The workspace paths below `root` that `glob` matches now and that are of `kind` (any:
/// files and folders), sorted; a symlink is never listed nor followed, and a folder is
/// entered only when something below it could match.
pub fn glob_matches(
    root: &Path,
    glob: &agentguard_policy::Glob,
    kind: agentguard_policy::PathKind,
) -> Vec<String> {
    use agentguard_policy::PathKind;
    let mut found = Vec::new();
    let mut folders = vec![String::new()];
    let mut read = 0;
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&folder)) else {
            continue;
        };
        for entry in entries.flatten() {
            read += 1;
            if read > MAX_GLOB_WALK {
                found.sort();
                return found;
            }
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let path = if folder.is_empty() {
                name
            } else {
                format!("{folder}/{name}")
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            let fits = match kind {
                PathKind::File => meta.is_file(),
                PathKind::Dir => meta.is_dir(),
                PathKind::Any => true,
            };
            if fits && glob.matches(&path) {
                found.push(path.clone());
            }
            if meta.is_dir() && glob.may_match_below(&path) {
                folders.push(path);
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests;

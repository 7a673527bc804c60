//! Repository hygiene: the architecture invariants that a compiler cannot check.
//!
//! Called by `cargo xtask tidy` and by a `#[test]`, so plain `cargo test` enforces it
//! (rust-analyzer's tidy pattern). Each check names the file and the rule it breaks:
//! `source` reads the Rust files (docs line, purity, who spawns, sizes), `graph` reads the
//! manifests through `cargo metadata` (lints, banned dependencies, the crate graph of
//! DESIGN.md), `docs` compares the tables in docs/ with the code (reason codes, exit
//! codes, audit keys, param rules), and `layers` holds each crate's modules to the import order
//! of docs/ARCHITECTURE.md's tables.

mod config_keys;
mod docs;
mod graph;
mod layers;
mod source;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::cmd;

/// Files and folders allowed at the repository root; anything else is a stray.
const ROOT_ENTRIES: &[&str] = &[
    ".cargo",
    ".ci",
    ".git",
    ".gitignore",
    "CHANGELOG.md",
    "Cargo.lock",
    "Cargo.toml",
    "README.md",
    "crates",
    "docs",
    "fuzz",
    "rustfmt.toml",
    "target",
    "tests",
    "xtask",
];

pub(crate) fn run() -> Result<()> {
    let root = cmd::root();
    let mut problems = Vec::new();
    let rust_files = files(&root, "rs");
    source::check(&root, &rust_files, &mut problems)?;
    graph::check(&root, &mut problems)?;
    docs::check(&root, &rust_files, &mut problems)?;
    layers::check(&root, &mut problems)?;
    for entry in fs::read_dir(&root)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !ROOT_ENTRIES.contains(&name.as_str()) {
            problems.push(format!(
                "{name}: a stray file at the repository root; move it or add it to tidy's ROOT_ENTRIES"
            ));
        }
    }
    empty_files(&root, &mut problems)?;
    if problems.is_empty() {
        println!(
            "tidy: {} Rust files, their manifests and the docs' tables are in order",
            rust_files.len()
        );
        Ok(())
    } else {
        bail!(
            "tidy found {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        )
    }
}

/// Tracked files with no content (a stray redirect's leftover, like the `oom` files REVIEW.md
/// found): in a git checkout only.
fn empty_files(root: &std::path::Path, problems: &mut Vec<String>) -> Result<()> {
    if !root.join(".git").exists() {
        return Ok(());
    }
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()?;
    if !listed.status.success() {
        problems.push("git ls-files failed: cannot check for empty tracked files".into());
        return Ok(());
    }
    for name in String::from_utf8_lossy(&listed.stdout)
        .split('\0')
        .filter(|n| !n.is_empty())
    {
        if fs::metadata(root.join(name)).is_ok_and(|m| m.is_file() && m.len() == 0) {
            problems.push(format!(
                "{name}: an empty tracked file; delete it or give it content"
            ));
        }
    }
    Ok(())
}

/// The path relative to the root, for messages.
pub(crate) fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Files with this extension, skipping `target/` and hidden folders.
pub(crate) fn files(root: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if path.is_dir() {
                if !hidden && entry.file_name() != "target" {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn tidy() {
        super::run().unwrap();
    }
}

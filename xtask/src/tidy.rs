//! Repository hygiene: the architecture invariants that a compiler cannot check.
//!
//! Called by `cargo xtask tidy` and by a `#[test]`, so plain `cargo test` enforces it
//! (rust-analyzer's tidy pattern). Each check names the file and the rule it breaks.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::cmd;

pub(crate) fn run() -> Result<()> {
    let root = cmd::root();
    let mut problems = Vec::new();
    let rust_files = files(&root, "rs");

    // Every Rust file says what it does and why it exists.
    for file in &rust_files {
        let text = fs::read_to_string(file)?;
        if !text.starts_with("//!") {
            problems.push(format!(
                "{}: the first line must be a `//!` comment saying what the module does and why",
                rel(&root, file)
            ));
        }
    }

    for manifest in files(&root, "toml")
        .iter()
        .filter(|p| p.ends_with("Cargo.toml") && *p != &root.join("Cargo.toml"))
    {
        let text = fs::read_to_string(manifest)?;
        let name = rel(&root, manifest);
        if !text.contains("[lints]\nworkspace = true") {
            problems.push(format!(
                "{name}: every crate inherits the workspace lints (`[lints] workspace = true`)"
            ));
        }
        let deps = dependencies(&text);
        let is_library = name.starts_with("crates/") && !name.starts_with("crates/agentguard-cli/");
        if is_library {
            for banned in ["anyhow", "clap"] {
                if deps.iter().any(|d| d == banned) {
                    problems.push(format!("{name}: libraries use thiserror, not {banned}"));
                }
            }
        }
        if name == "crates/agentguard-policy/Cargo.toml" {
            for dep in &deps {
                if !["idna", "ipnet", "thiserror"].contains(&dep.as_str()) {
                    problems.push(format!("{name}: the policy crate is pure; dependency `{dep}` is not on its short list"));
                }
            }
        }
    }

    // Architecture invariants over the source text.
    for file in &rust_files {
        let name = rel(&root, file);
        let text = fs::read_to_string(file)?;
        if name.starts_with("crates/agentguard-policy/") {
            for banned in [
                "std::fs",
                "std::process",
                "std::env",
                "TcpStream",
                "TcpListener",
                "UdpSocket",
                "ToSocketAddrs",
                "tokio",
                "File::",
            ] {
                if text.contains(banned) {
                    problems.push(format!(
                        "{name}: the policy crate does no I/O, but mentions `{banned}`"
                    ));
                }
            }
        }
        // Benchmark programs in examples/ start the real binary and peers, like tests do.
        let may_spawn = name.starts_with("crates/agentguard-container/")
            || name.starts_with("xtask/")
            || name.contains("/tests/")
            || name.contains("/examples/");
        if !may_spawn && text.contains(&["Command", "::new("].concat()) {
            problems.push(format!(
                "{name}: only agentguard-container (and xtask, tests, benchmark examples) may spawn processes"
            ));
        }
    }

    if problems.is_empty() {
        println!(
            "tidy: {} Rust files and their manifests are in order",
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

fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Files with this extension, skipping `target/` and hidden folders.
fn files(root: &Path, ext: &str) -> Vec<PathBuf> {
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

/// Dependency names from the `[dependencies]` table of a manifest.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && let Some((name, _)) = line.split_once('=') {
            let name = name.trim().split('.').next().unwrap_or_default().trim();
            if !name.is_empty() && !name.starts_with('#') {
                deps.push(name.to_owned());
            }
        }
    }
    deps
}

#[cfg(test)]
mod tests {
    #[test]
    fn tidy() {
        super::run().unwrap();
    }

    #[test]
    fn dependency_names_are_read_from_the_dependencies_table_only() {
        let manifest = "[package]\nname = \"x\"\n[dependencies]\nidna.workspace = true\nfoo = { version = \"1\" }\n[dev-dependencies]\nbar = \"1\"\n";
        assert_eq!(super::dependencies(manifest), ["idna", "foo"]);
    }
}

//! The module tables of docs/ARCHITECTURE.md are each crate's import order: a crate's modules
//! are listed from the bottom up, and a module uses only the ones above it in its list (or on
//! its own row), so there is no cycle inside a crate and the table says what depends on what.
//!
//! For every crate with a `| module | job |` table, each module file must be listed and each
//! listed file must exist; then every `crate::NAME` (and a sibling's `super::NAME`) in a
//! module's code (not its comments) before its tests, with the crate root's `pub use` re-exports resolved to the
//! module they come from, must name a module on the same row or above.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

/// Files that are roots or tests, never a row of a table.
fn is_root_or_test(module: &str) -> bool {
    let file = module.rsplit('/').next().unwrap_or(module);
    matches!(file, "lib" | "main") || module.split('/').any(|part| part == "tests")
}

pub(super) fn check(root: &Path, problems: &mut Vec<String>) -> Result<()> {
    let text =
        fs::read_to_string(root.join("docs/ARCHITECTURE.md")).context("docs/ARCHITECTURE.md")?;
    for (dir, rows) in tables(&text) {
        let src = root.join(&dir).join("src");
        let mut layer = BTreeMap::new();
        for (i, row) in rows.iter().enumerate() {
            for module in row {
                layer.insert(module.clone(), i);
            }
        }
        let mut files = Vec::new();
        modules(&src, "", &mut files)?;
        for module in layer.keys() {
            if !files.contains(module) {
                problems.push(format!(
                    "docs/ARCHITECTURE.md: {dir} lists `{module}.rs`, which does not exist"
                ));
            }
        }
        let exports = reexports(&src);
        for module in &files {
            let Some(&at) = layer.get(module) else {
                problems.push(format!(
                    "{dir}/src/{module}.rs: not in docs/ARCHITECTURE.md's module table of {dir}; list it where its imports put it"
                ));
                continue;
            };
            let text = fs::read_to_string(src.join(format!("{module}.rs")))?;
            // Code only: comments and doc links name modules without using them.
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .map(|line| format!("{line}\n"))
                .collect();
            let mut used = uses(&code, module, &exports);
            used.sort();
            used.dedup();
            for used in used {
                if let Some(&there) = layer.get(&used)
                    && there > at
                {
                    problems.push(format!(
                        "{dir}/src/{module}.rs uses `{used}`, which docs/ARCHITECTURE.md lists below it: a module uses only those above it (move the shared piece down, or reorder the table)"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Each `### `dir`` section with a `| module | job |` table: its rows, each the modules
/// (file names without `.rs`) of its first cell.
fn tables(text: &str) -> Vec<(String, Vec<Vec<String>>)> {
    let mut out: Vec<(String, Vec<Vec<String>>)> = Vec::new();
    let mut current: Option<(String, Vec<Vec<String>>, bool)> = None;
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("### ") {
            if let Some((dir, rows, true)) = current.take() {
                out.push((dir, rows));
            }
            let dir = header.split('`').nth(1).unwrap_or_default().to_owned();
            current = Some((dir, Vec::new(), false));
            continue;
        }
        let Some((_, rows, seen)) = current.as_mut() else {
            continue;
        };
        if line.starts_with("| module | job |") {
            *seen = true;
        } else if *seen && line.starts_with("| `") {
            let cell = line.split('|').nth(1).unwrap_or_default();
            let row: Vec<String> = cell
                .split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|name| name.strip_suffix(".rs"))
                .map(str::to_owned)
                .collect();
            rows.push(row);
        }
    }
    if let Some((dir, rows, true)) = current {
        out.push((dir, rows));
    }
    out
}

/// The module files under `src` (paths without `.rs`), roots and tests left out.
fn modules(src: &Path, prefix: &str, out: &mut Vec<String>) -> Result<()> {
    for entry in fs::read_dir(src).with_context(|| src.display().to_string())? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            modules(&path, &format!("{prefix}{name}/"), out)?;
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let module = format!("{prefix}{stem}");
            if !is_root_or_test(&module) {
                out.push(module);
            }
        }
    }
    out.sort();
    Ok(())
}

/// What the crate root re-exports: item name to the module it comes from.
fn reexports(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for root in ["lib.rs", "main.rs"] {
        let Ok(text) = fs::read_to_string(src.join(root)) else {
            continue;
        };
        for statement in text.split(';') {
            let Some(rest) = statement.trim().strip_prefix("pub use ") else {
                continue;
            };
            let Some((module, items)) = rest.split_once("::") else {
                continue;
            };
            for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
                let item = item.trim().rsplit("::").next().unwrap_or_default();
                if !item.is_empty() {
                    out.insert(item.to_owned(), module.trim().to_owned());
                }
            }
        }
    }
    out
}

/// The modules `code` (of `module`) names through `crate::` and `super::`.
fn uses(code: &str, module: &str, exports: &BTreeMap<String, String>) -> Vec<String> {
    let parent = module.rsplit_once('/').map(|(p, _)| p);
    let mut out = Vec::new();
    for (anchor, base) in [("crate::", None), ("super::", parent)] {
        for (i, _) in code.match_indices(anchor) {
            let rest = &code[i + anchor.len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|n| n.split("::").next())
                    .collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let name = exports.get(&name).cloned().unwrap_or(name);
                let full = match base {
                    Some(parent) if anchor == "super::" => format!("{parent}/{name}"),
                    _ if anchor == "super::" => continue,
                    _ => name,
                };
                if full != module {
                    out.push(full);
                }
            }
        }
    }
    out
}

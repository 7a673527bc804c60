//! Checks over the manifests, read through `cargo metadata`: every crate inherits the
//! workspace lints, libraries use thiserror (never anyhow or clap), the policy crate keeps its
//! short dependency list, and the crate graph is DESIGN.md's.
//!
//! The graph rules: `policy` depends on no other agentguard crate, `audit` only on `policy`
//! (for the one pure table of hidden characters, which param values are refused by too);
//! `container`,
//! `netpin` and `egress` sit on them and not on each other, except `egress -> netpin`; only
//! `sandbox` composes `container` with `egress`, the relay (which runs inside containers)
//! names nothing, `config` reads the run configuration for the CLI and the Python package
//! (`python`), and only those two compose everything. A new agentguard crate must be given its rule here.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::rel;

/// Each agentguard package and the agentguard crates its normal dependencies may name.
const GRAPH: &[(&str, &[&str])] = &[
    ("agentguard-policy", &[]),
    // The one hidden-character table is policy's (a value with one is refused there), and
    // the audit log escapes the same characters; policy names no agentguard crate.
    ("agentguard-audit", &["agentguard-policy"]),
    (
        "agentguard-container",
        &["agentguard-policy", "agentguard-audit"],
    ),
    (
        "agentguard-netpin",
        &["agentguard-policy", "agentguard-audit"],
    ),
    (
        "agentguard-egress",
        &["agentguard-policy", "agentguard-audit", "agentguard-netpin"],
    ),
    // The relay runs inside containers: std and rustix, nothing of ours.
    ("agentguard-relay", &[]),
    // The composition of a container with its per-run egress proxy.
    (
        "agentguard-sandbox",
        &[
            "agentguard-policy",
            "agentguard-audit",
            "agentguard-container",
            "agentguard-netpin",
            "agentguard-egress",
        ],
    ),
    // MCP: the only crate that names rmcp; it adapts the sandbox and the fetcher.
    (
        "agentguard-mcp",
        &[
            "agentguard-policy",
            "agentguard-audit",
            "agentguard-container",
            "agentguard-netpin",
            "agentguard-sandbox",
        ],
    ),
    // Kubernetes: the pure manifest compiler, beside the container crate.
    (
        "agentguard-k8s",
        &[
            "agentguard-policy",
            "agentguard-audit",
            "agentguard-container",
        ],
    ),
    // The kubectl executor: runs what the compiler made, with the container crate's result.
    (
        "agentguard-kubectl",
        &[
            "agentguard-policy",
            "agentguard-audit",
            "agentguard-container",
            "agentguard-k8s",
        ],
    ),
    ("agentguard-test-support", &[]),
    // The sandbox for its relay alone: engine = "oci" runs take the receipt with it as init.
    (
        "agentguard-e2e",
        &[
            "agentguard-container",
            "agentguard-sandbox",
            "agentguard-test-support",
        ],
    ),
    // The run configuration: the seed's keys into a spec and a sandbox, for the CLI and the
    // Python binding alike.
    (
        "agentguard-config",
        &[
            "agentguard-policy",
            "agentguard-audit",
            "agentguard-container",
            "agentguard-netpin",
            "agentguard-egress",
            "agentguard-sandbox",
            "agentguard-k8s",
        ],
    ),
    // The Python package: conversions over the config, the sandbox, the fetcher, the proxy,
    // the audit log, and the MCP crate's tool results and argument conversion.
    (
        "agentguard-python",
        &[
            "agentguard-policy",
            "agentguard-audit",
            "agentguard-container",
            "agentguard-netpin",
            "agentguard-egress",
            "agentguard-sandbox",
            "agentguard-config",
            "agentguard-mcp",
        ],
    ),
    (
        "agentguard-cli",
        &[
            "agentguard-config",
            "agentguard-policy",
            "agentguard-audit",
            "agentguard-container",
            "agentguard-netpin",
            "agentguard-egress",
            "agentguard-sandbox",
            "agentguard-mcp",
            "agentguard-k8s",
            "agentguard-kubectl",
        ],
    ),
];

/// What the pure policy crate may depend on.
// icu_properties: Unicode's property tables (the hidden characters, dashes); regex: the
// anchored `pattern` of a string param. Both are pure data and code, no I/O.
const POLICY_DEPS: &[&str] = &["icu_properties", "idna", "ipnet", "regex", "thiserror"];

pub(super) fn check(root: &Path, problems: &mut Vec<String>) -> Result<()> {
    let output = Command::new("cargo")
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: Value = serde_json::from_slice(&output.stdout).context("cargo metadata")?;
    let packages = metadata["packages"].as_array().context("no packages")?;
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        let manifest = package["manifest_path"].as_str().unwrap_or_default();
        let manifest_name = rel(root, Path::new(manifest));
        let text = std::fs::read_to_string(manifest)?;
        if !text.contains("[lints]\nworkspace = true") {
            problems.push(format!(
                "{manifest_name}: every crate inherits the workspace lints (`[lints] workspace = true`)"
            ));
        }
        let deps: Vec<&str> = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .collect();
        rules(name, &manifest_name, &deps, problems);
    }
    Ok(())
}

/// The rules for one package and its normal dependencies.
fn rules(name: &str, manifest: &str, deps: &[&str], problems: &mut Vec<String>) {
    let library =
        name.starts_with("agentguard-") && !["agentguard-cli", "agentguard-e2e"].contains(&name);
    if library {
        for banned in ["anyhow", "clap"] {
            // The config loader is the CLI's, shared with the Python binding: its errors stay
            // anyhow chains whose causes each front end maps (exit codes, exception classes).
            let shared_loader = name == "agentguard-config" && banned == "anyhow";
            if deps.contains(&banned) && !shared_loader {
                problems.push(format!("{manifest}: libraries use thiserror, not {banned}"));
            }
        }
    }
    if name == "agentguard-policy" {
        for dep in deps.iter().filter(|d| !POLICY_DEPS.contains(d)) {
            problems.push(format!(
                "{manifest}: the policy crate is pure; dependency `{dep}` is not on its short list"
            ));
        }
    }
    if !name.starts_with("agentguard-") {
        return;
    }
    let Some((_, allowed)) = GRAPH.iter().find(|(package, _)| *package == name) else {
        problems.push(format!(
            "{manifest}: {name} has no rule in tidy's crate graph; add one that keeps DESIGN.md's shape"
        ));
        return;
    };
    for dep in deps.iter().filter(|d| d.starts_with("agentguard-")) {
        if !allowed.contains(dep) {
            problems.push(format!(
                "{manifest}: {name} must not depend on {dep} (DESIGN.md's crate graph)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_graph_rules_refuse_a_sideways_arrow() {
        let mut problems = Vec::new();
        super::rules(
            "agentguard-container",
            "c",
            &["agentguard-egress", "agentguard-policy"],
            &mut problems,
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("must not depend on agentguard-egress"));
        let mut problems = Vec::new();
        super::rules(
            "agentguard-audit",
            "a",
            &["agentguard-container", "anyhow"],
            &mut problems,
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        let mut problems = Vec::new();
        super::rules("agentguard-new", "n", &[], &mut problems);
        assert!(problems[0].contains("no rule"), "{problems:?}");
    }
}

//! `cargo xtask k8s-validate`: the Kubernetes golden manifests through the two offline
//! validators from PyPI (installed by setup): `kubernetes-validate --strict` against the
//! oldest and newest Kubernetes versions both it and k8s-openapi support (1.33 and 1.37), and
//! `checkov --framework kubernetes`, which must report zero failed checks (and skips none);
//! then what the NetworkPolicies of runs side by side mean (`netpol.rs`).

use anyhow::{Context, Result, bail};

use crate::{cmd, setup};

/// The versions validated against: k8s-openapi's oldest and newest (features v1_33..v1_37).
const VERSIONS: &[&str] = &["1.33.0", "1.37.0"];

pub(crate) fn run() -> Result<()> {
    println!("== k8s: golden manifests through kubernetes-validate and checkov");
    let golden = cmd::root().join("crates/agentguard-k8s/tests/golden");
    let mut files: Vec<String> = std::fs::read_dir(&golden)
        .with_context(|| format!("reading {}", golden.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no golden manifests in {}", golden.display());
    }
    setup::K8S_VENV.ensure()?;
    let validate = setup::K8S_VENV.bin("kubernetes-validate");
    for version in VERSIONS {
        let mut args = vec!["--strict", "--quiet", "-k", version];
        args.extend(files.iter().map(String::as_str));
        cmd::run(&validate.to_string_lossy(), &args)
            .with_context(|| format!("kubernetes-validate --strict -k {version}"))?;
        println!(
            "   kubernetes-validate --strict -k {version}: {} files pass",
            files.len()
        );
    }
    let checkov = setup::K8S_VENV.bin("checkov");
    let out = cmd::output(
        &checkov.to_string_lossy(),
        &[
            "-d",
            &golden.to_string_lossy(),
            "--framework",
            "kubernetes",
            "--skip-download",
            "--compact",
            "--quiet",
        ],
    )?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = text
        .lines()
        .find(|l| l.contains("Passed checks:"))
        .context("checkov printed no summary")?
        .trim()
        .to_owned();
    if !out.status.success()
        || !summary.contains("Failed checks: 0,")
        || !summary.contains("Skipped checks: 0")
    {
        bail!("checkov: {summary}\n{text}");
    }
    println!("   checkov --framework kubernetes: {summary}");
    crate::netpol::run()
}

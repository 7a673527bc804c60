//! `cargo xtask ci`: everything CI checks, in the order a developer would want to see failures.
//!
//! Set-up first (so a fresh machine works), then the cheap checks, then the workspace tests
//! (which include tidy), then every fuzz target for 30 s, then e2e on every engine and
//! runtime, none of which may be skipped, then the Python package on CPython 3.9 and 3.13,
//! then README's install (`cargo install --locked` into a fresh root: its version and size),
//! then the cluster's proxy image (`release.rs`): its static release build (8 min 20 s from
//! nothing here), imported into Docker and Podman and run read-only as 65534 with no
//! capability, `--version`, and no `/bin/sh`. The release tarball (`cargo xtask dist`) packs
//! the same binary and is not built here.

use anyhow::Result;

use crate::{cmd, e2e, fuzz, k8s, python, release, setup};

pub(crate) fn run() -> Result<()> {
    setup::run()?;
    cmd::disk_report();
    println!("== ci: formatting");
    cmd::run("cargo", &["fmt", "--all", "--", "--check"])?;
    println!("== ci: clippy (warnings are errors)");
    cmd::run(
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    println!("== ci: workspace tests");
    // The kubectl executor's tests need kmock (the venv setup made) and kubectl: never skipped here.
    cmd::run_with(
        &cmd::root(),
        &[("AGENTGUARD_REQUIRE_KMOCK", "1")],
        "cargo",
        &["test", "--workspace", "--locked"],
    )?;
    k8s::run()?;
    fuzz::run(&["--seconds".to_owned(), "30".to_owned()])?;
    // The fuzz build (sanitizers, nightly) is used by nothing after it: give its disk back.
    cmd::remove_dir(&cmd::root().join("fuzz/target"))?;
    cmd::disk_report();
    e2e::run(&["--require".to_owned(), "docker,podman,oci,runsc".to_owned()])?;
    cmd::disk_report();
    // The Python package: one abi3 wheel, its tests on CPython 3.9 and 3.13 (docker+runsc).
    python::run()?;
    // README's Install section: cargo install --locked, its version and its size.
    release::install_check()?;
    // The cluster's proxy image, built and run hardened in both engines.
    release::proxy_image()?;
    println!("== ci: all checks passed");
    Ok(())
}

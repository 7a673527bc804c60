//! `cargo xtask ci`: everything CI checks, in the order a developer would want to see failures.
//!
//! Set-up first (so a fresh machine works), then the cheap checks, then the workspace tests
//! (which include tidy), then every fuzz target for 30 s, then e2e on every engine and
//! runtime, none of which may be skipped, then the Python package's tests on CPython 3.9 and
//! 3.13, then the cluster's proxy image (`release.rs`): the static binary imported into Docker
//! and Podman and run read-only as 65534 with no capability, `--version`, and no `/bin/sh`.
//! The release tarball (`cargo xtask dist`) packs the same binary and is not built here.
//!
//! What is shipped takes four release builds of the whole tree (5 to 8 minutes each from
//! nothing on 2 cores); they run beside the steps from the set-up on (`ship.rs`). CI waits
//! for the wheel before the Python tests and for the rest before the proxy image.
//!
//! CI must finish within 60 minutes on a fresh 2-core machine, so every step's wall time is
//! printed when it ends and all of them again at the end (or at the failing step).

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::{cmd, e2e, fuzz, k8s, python, release, setup, ship};

/// The steps' wall times and how busy the machine's cores were, printed as each ends and as a
/// table at the end: a step that leaves cores idle is one whose wait can overlap another's work.
pub(crate) struct Clock {
    start: Instant,
    steps: Vec<(&'static str, Duration, Option<f64>)>,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            steps: Vec::new(),
        }
    }

    pub(crate) fn step(
        &mut self,
        name: &'static str,
        f: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let start = Instant::now();
        let before = cpu_ticks();
        let result = f();
        let took = start.elapsed();
        let busy = before.zip(cpu_ticks()).and_then(|((b0, t0), (b1, t1))| {
            (t1 > t0).then(|| (b1 - b0) as f64 / (t1 - t0) as f64)
        });
        self.steps.push((name, took, busy));
        println!(
            "== ci: {name} took {}, cores {} busy ({} since the start)",
            minutes(took),
            percent(busy),
            minutes(self.start.elapsed())
        );
        if result.is_err() {
            self.table();
        }
        result
    }

    pub(crate) fn table(&self) {
        println!("== ci: wall time per step, and how busy the cores were");
        for (name, took, busy) in &self.steps {
            println!("   {:>12}  {:>4}  {name}", minutes(*took), percent(*busy));
        }
        println!("   {:>12}        in all", minutes(self.start.elapsed()));
    }
}

/// The machine's (busy, total) CPU ticks from `/proc/stat`'s first line; `None` off Linux.
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3)? + fields.get(4)?;
    Some((total - idle, total))
}

fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| "?".to_owned(), |s| format!("{:.0}%", s * 100.0))
}

/// `12 min 05 s`.
fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    format!("{} min {:02} s", s / 60, s % 60)
}

pub(crate) fn run() -> Result<()> {
    let mut clock = Clock::new();
    clock.step("setup", || setup::run().map(|_| cmd::disk_report()))?;
    // What is shipped is built by a child at the lowest CPU priority from here on: it takes
    // what the steps below leave idle (their waits on engines and containers) and slows none.
    let mut builds = ship::ReleaseBuilds::start()?;
    clock.step("formatting and clippy", lint)?;
    clock.step("workspace tests", || {
        println!("== ci: workspace tests");
        // The kubectl executor's tests need kmock (the venv setup made) and kubectl: never
        // skipped here.
        cmd::run_with(
            &cmd::root(),
            &[("AGENTGUARD_REQUIRE_KMOCK", "1")],
            "cargo",
            &["test", "--workspace", "--locked"],
        )
    })?;
    clock.step("k8s manifests", k8s::run)?;
    clock.step("fuzz", || {
        fuzz::run(&["--seconds".to_owned(), "30".to_owned()])?;
        // The fuzz build (sanitizers, nightly) is used by nothing after it: give its disk back.
        cmd::remove_dir(&cmd::root().join("fuzz/target"))?;
        cmd::disk_report();
        Ok(())
    })?;
    clock.step("e2e", || {
        e2e::run(&["--require".to_owned(), "docker,podman,oci,runsc".to_owned()])?;
        cmd::disk_report();
        Ok(())
    })?;
    // The Python package: the one abi3 wheel's tests on CPython 3.9 and 3.13 (docker+runsc),
    // while the other release builds go on beside them.
    clock.step("waiting for the wheel", || builds.wait_for(ship::WHEEL))?;
    clock.step("python tests", python::tests)?;
    // README's `cargo install`, the static binary and the wheel from source.
    clock.step("the release builds' remainder", || builds.finish())?;
    // The cluster's proxy image, built and run hardened in both engines.
    clock.step("proxy image", release::proxy_image)?;
    clock.table();
    println!("== ci: all checks passed");
    Ok(())
}

fn lint() -> Result<()> {
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
    )
}

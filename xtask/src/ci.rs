//! `cargo xtask ci`: everything CI checks, in the order a developer would want to see failures.
//!
//! Set-up first (so a fresh machine works), then the cheap checks, then the workspace tests
//! (which include tidy), then every fuzz target for 30 s, then e2e on every engine and
//! runtime, none of which may be skipped, then the Python package's tests on CPython 3.9 and
//! 3.13, then the cluster's proxy image (`release.rs`): the static binary imported into Docker
//! and Podman and run read-only as 65534 with no capability, `--version`, and no `/bin/sh`.
//! The release tarball (`cargo xtask dist`) packs the same binary and is not built here.
//!
//! What is shipped takes four release builds of the whole tree (the abi3 wheel with zig's
//! linker, the wheel from source, README's `cargo install --locked` with its version and
//! size, and the crt-static binary: 5 to 8 minutes each from nothing on 2 cores). They run
//! from the set-up on, in a child at `nice -n 19` with target folders of their own
//! ([`cmd::ship_dir`]), so they take only the CPU the steps in front leave idle while those
//! wait on engines and containers, and hold none of `target/`'s locks; CI waits for what is
//! left of them after e2e.
//!
//! CI must finish within 60 minutes on a fresh 2-core machine, so every step's wall time is
//! printed when it ends and all of them again at the end (or at the failing step).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::{cmd, e2e, fuzz, k8s, python, release, setup};

/// The steps' wall times and how busy the machine's cores were, printed as each ends and as a
/// table at the end: a step that leaves cores idle is one whose wait can overlap another's work.
struct Clock {
    start: Instant,
    steps: Vec<(&'static str, Duration, Option<f64>)>,
}

impl Clock {
    fn step(&mut self, name: &'static str, f: impl FnOnce() -> Result<()>) -> Result<()> {
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

    fn table(&self) {
        println!("== ci: wall time per step, and how busy the cores were");
        for (name, took, busy) in &self.steps {
            println!("   {:>9}  {:>4}  {name}", minutes(*took), percent(*busy));
        }
        println!("   {:>9}        in all", minutes(self.start.elapsed()));
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

impl Clock {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            steps: Vec::new(),
        }
    }
}

pub(crate) fn run() -> Result<()> {
    let mut clock = Clock::new();
    clock.step("setup", || setup::run().map(|_| cmd::disk_report()))?;
    // What is shipped is built by a child at the lowest CPU priority from here on: it takes
    // what the steps below leave idle (their waits on engines and containers) and slows none.
    let builds = ReleaseBuilds::start()?;
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
    // The wheel, the wheel from source, README's `cargo install` and the static binary.
    clock.step("the release builds' remainder", || builds.finish())?;
    // The Python package: the one abi3 wheel's tests on CPython 3.9 and 3.13 (docker+runsc).
    clock.step("python tests", python::tests)?;
    // The cluster's proxy image, built and run hardened in both engines.
    clock.step("proxy image", release::proxy_image)?;
    clock.table();
    println!("== ci: all checks passed");
    Ok(())
}

/// `xtask ci-release-builds`, the child [`ReleaseBuilds`] starts: the wheel, the wheel
/// installed from source (`pip install ./crates/agentguard-python`, checked), README's
/// `cargo install --locked` (checked: version and size), and the static binary. Each in its
/// own target folder ([`cmd::ship_dir`]), so the later steps that need the wheel and the
/// static binary find them built.
pub(crate) fn release_builds() -> Result<()> {
    let mut clock = Clock::new();
    clock.step("wheel", || python::wheel().map(|_| ()))?;
    clock.step("python from source", python::from_source)?;
    clock.step("cargo install", release::install_check)?;
    clock.step("static binary", || release::static_binary().map(|_| ()))?;
    clock.table();
    Ok(())
}

/// The child running [`release_builds`] under `nice -n 19`, its output in a file (printed when
/// it is waited for), killed with its process group if CI stops first.
struct ReleaseBuilds {
    child: Child,
    log: PathBuf,
}

impl ReleaseBuilds {
    fn start() -> Result<Self> {
        let log = cmd::target_dir().join("xtask/ci-release-builds.log");
        std::fs::create_dir_all(cmd::target_dir().join("xtask"))?;
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let exe = std::env::current_exe().context("finding this xtask's executable")?;
        let child = Command::new("nice")
            .args(["-n", "19"])
            .arg(exe)
            .arg("ci-release-builds")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .context("starting nice -n 19 xtask ci-release-builds")?;
        println!(
            "== ci: the release builds run beside the next steps at nice 19; their output: {}",
            log.display()
        );
        Ok(Self { child, log })
    }

    fn finish(mut self) -> Result<()> {
        println!("== ci: waiting for the release builds");
        let status = self
            .child
            .wait()
            .context("waiting for the release builds")?;
        let said = std::fs::read_to_string(&self.log).unwrap_or_default();
        print!("{said}");
        if !status.success() {
            bail!("the release builds failed ({status}); their output is above");
        }
        Ok(())
    }
}

impl Drop for ReleaseBuilds {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let _ = self.child.wait();
        }
    }
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

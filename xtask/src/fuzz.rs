//! `cargo xtask fuzz [--seconds N] [TARGET...]`: builds every cargo-fuzz target in `fuzz/`
//! with the nightly toolchain and runs each for N seconds (30 in CI) from its seed corpus.
//!
//! The seeds (`fuzz/corpus/TARGET/seed-*`) come from the tests; what libFuzzer adds to the
//! corpus stays out of git. A crash fails the task and leaves its input in
//! `fuzz/artifacts/TARGET/`, to become a regression test.
//!
//! The targets are built without a sanitizer (`--sanitizer none`): every crate of ours forbids
//! unsafe code (`unsafe_code = "forbid"`, the fuzz crate's own too), so the memory errors
//! AddressSanitizer finds can come only from a dependency's unsafe code, while what the
//! targets look for (a panic, an overflow, a debug assertion, an answer that breaks a
//! property) needs none. Without it the build is shorter and each second runs more inputs.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use anyhow::{Context, Result, anyhow, bail};

use crate::cmd;

/// Every target, in `fuzz/Cargo.toml`.
pub(crate) const TARGETS: &[&str] = &[
    "connect_head",
    "host_pattern",
    "https_url",
    "audit_line",
    "client_hello",
    "config",
    "params",
    "route_target",
    "route_response",
];

pub(crate) fn run(args: &[String]) -> Result<()> {
    let mut seconds = 30u64;
    let mut targets = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--seconds" => {
                let value = iter.next().map(String::as_str).unwrap_or_default();
                seconds = value
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--seconds {value:?}: expected a number"))?;
            }
            target if TARGETS.contains(&target) => targets.push(target),
            other => bail!(
                "unknown fuzz argument {other:?}; expected --seconds N or a target: {}",
                TARGETS.join(", ")
            ),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "== fuzz: {} targets, {seconds} s each, {workers} at a time",
        targets.len()
    );
    let fuzz = cmd::root().join("fuzz");
    cmd::run_in(
        &fuzz,
        "cargo",
        &["+nightly", "fuzz", "build", "--sanitizer", "none"],
    )?;
    // libFuzzer runs on one core: one target per core keeps every second of fuzzing and
    // takes a fraction of the wall time (CI's 60 minutes).
    let queue = Mutex::new(targets.into_iter());
    let failures: Vec<anyhow::Error> = std::thread::scope(|scope| {
        let runners: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let next = queue.lock().map_err(|_| anyhow!("fuzz queue"))?.next();
                        let Some(target) = next else { return Ok(()) };
                        fuzz_one(&fuzz, target, seconds)?;
                    }
                })
            })
            .collect();
        runners
            .into_iter()
            .filter_map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err(anyhow!("a fuzz runner panicked")))
                    .err()
            })
            .collect()
    });
    failures.into_iter().next().map_or(Ok(()), Err)
}

/// One target for `seconds`: its last line of statistics on success, all of libFuzzer's
/// output and the crash's artifact path on failure.
fn fuzz_one(fuzz: &Path, target: &str, seconds: u64) -> Result<()> {
    let corpus = format!("corpus/{target}");
    let time = format!("-max_total_time={seconds}");
    let args = [
        "+nightly",
        "fuzz",
        "run",
        "--sanitizer",
        "none",
        target,
        &corpus,
        "--",
        &time,
    ];
    let out = Command::new("cargo")
        .args(args)
        .current_dir(fuzz)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting cargo fuzz run {target}"))?;
    let said = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        println!(
            "$ cargo {}\n{}{said}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        bail!(
            "fuzz target {target} failed ({}): its input is in fuzz/artifacts/{target}/",
            out.status
        );
    }
    let last = said
        .lines()
        .rev()
        // libFuzzer's last statistics line: `#RUNS DONE cov: ... exec/s: ...`.
        .find(|l| {
            l.strip_prefix('#')
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .unwrap_or("(no statistics line)");
    println!("   {target}: {last}");
    Ok(())
}

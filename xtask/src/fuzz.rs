//! `cargo xtask fuzz [--seconds N] [TARGET...]`: builds every cargo-fuzz target in `fuzz/`
//! with the nightly toolchain and runs each for N seconds (30 in CI) from its seed corpus.
//!
//! The seeds (`fuzz/corpus/TARGET/seed-*`) come from the tests; what libFuzzer adds to the
//! corpus stays out of git. A crash fails the task and leaves its input in
//! `fuzz/artifacts/TARGET/`, to become a regression test.

use anyhow::{Result, bail};

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
    println!("== fuzz: {} targets, {seconds} s each", targets.len());
    let fuzz = cmd::root().join("fuzz");
    cmd::run_in(&fuzz, "cargo", &["+nightly", "fuzz", "build"])?;
    for target in targets {
        let corpus = format!("corpus/{target}");
        let time = format!("-max_total_time={seconds}");
        cmd::run_in(
            &fuzz,
            "cargo",
            &["+nightly", "fuzz", "run", target, &corpus, "--", &time],
        )?;
    }
    Ok(())
}

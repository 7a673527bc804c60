//! Container overhead: `agentguard run` of a trivial allowlisted command against the raw
//! engine `run` with the same hardened argv (taken from `agentguard run --dry-run`), rounds
//! alternating, medians of wall time. Run it through `cargo xtask bench container`.
//!
//! Usage: run_bench AGENTGUARD_BINARY CONFIG [ROUNDS]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn timed(command: &mut Command) -> Duration {
    let start = Instant::now();
    let status = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run");
    let elapsed = start.elapsed();
    assert!(status.success(), "{command:?} failed with {status}");
    elapsed
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let binary = args
        .next()
        .expect("usage: run_bench AGENTGUARD_BINARY CONFIG [ROUNDS]");
    let config = args.next().expect("CONFIG");
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(15);

    let dry = Command::new(&binary)
        .args(["run", "--config", &config, "noop", "--dry-run"])
        .output()
        .expect("dry run");
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let argv: Vec<String> = String::from_utf8_lossy(&dry.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let name_at = argv.iter().position(|a| a == "--name").expect("--name") + 1;

    let (mut raw, mut ours) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut args = argv[1..].to_vec();
        args[name_at - 1] = format!("agentguard-bench-{}-{round}", std::process::id());
        raw.push(timed(Command::new(&argv[0]).args(&args)));
        ours.push(timed(
            Command::new(&binary).args(["run", "--config", &config, "noop"]),
        ));
    }
    let (r, o) = (median(raw), median(ours));
    println!("| path | median wall time | ratio to raw |");
    println!("| --- | ---: | ---: |");
    println!(
        "| raw `{} run` with the same hardened argv (baseline) | {:.0} ms | 1.00 |",
        argv[0],
        r.as_secs_f64() * 1e3
    );
    println!(
        "| `agentguard run` | {:.0} ms | {:.3} |",
        o.as_secs_f64() * 1e3,
        o.as_secs_f64() / r.as_secs_f64()
    );
    println!("\n{rounds} alternating rounds of `true` in the busybox probe image.");
}

//! Container overhead: `agentguard run` of a trivial allowlisted command against the raw
//! engine `run` with the same hardened argv (taken from `agentguard run --dry-run`, with the
//! command as its own entrypoint instead of the relay that takes the isolation receipt, whose
//! mount source exists only during a run), and that raw argv with the relay mounted and taking
//! the receipt (the relay written by `agentguard k8s relay`), so the receipt's whole cost per run
//! (mount, one more exec, the checks) is measured side by side; rounds alternating, medians of
//! wall time; and the median time the receipt's checks took inside the container, from the
//! runs' audit log.
//! Run it through `cargo xtask bench container`.
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
    let relay = std::path::Path::new(&config).with_file_name("relay");
    let _ = std::fs::remove_file(&relay);
    let written = Command::new(&binary)
        .args(["k8s", "relay"])
        .arg(&relay)
        .status()
        .expect("agentguard k8s relay");
    assert!(written.success(), "agentguard k8s relay failed");
    let receipt_argv = relay_from(&argv, &relay.to_string_lossy());
    let argv = without_relay(argv);
    let named = |argv: &[String], round: usize, peer: &str| {
        let mut args = argv[1..].to_vec();
        let at = args.iter().position(|a| a == "--name").expect("--name") + 1;
        args[at] = format!("agentguard-bench-{}-{peer}{round}", std::process::id());
        args
    };

    let (mut raw, mut receipt, mut ours) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        raw.push(timed(
            Command::new(&argv[0]).args(named(&argv, round, "raw")),
        ));
        receipt.push(timed(Command::new(&argv[0]).args(named(
            &receipt_argv,
            round,
            "receipt",
        ))));
        ours.push(timed(
            Command::new(&binary).args(["run", "--config", &config, "noop"]),
        ));
    }
    let (r, t, o) = (median(raw), median(receipt), median(ours));
    println!("| path | median wall time | ratio to raw |");
    println!("| --- | ---: | ---: |");
    println!(
        "| raw `{} run` with the same hardened argv (baseline) | {:.0} ms | 1.00 |",
        argv[0],
        r.as_secs_f64() * 1e3
    );
    println!(
        "| the same raw run with the relay mounted, taking the isolation receipt before `true` | {:.0} ms | {:.3} |",
        t.as_secs_f64() * 1e3,
        t.as_secs_f64() / r.as_secs_f64()
    );
    println!(
        "| `agentguard run` | {:.0} ms | {:.3} |",
        o.as_secs_f64() * 1e3,
        o.as_secs_f64() / r.as_secs_f64()
    );
    let receipt = receipt_micros(&config);
    println!(
        "| the isolation receipt's checks inside the container (`micros` of the runs' `isolation_receipt` events) | {:.2} ms | |",
        receipt as f64 / 1e3
    );
    println!(
        "\n{rounds} alternating rounds of `true` in the busybox probe image. The receipt's whole cost per run (the relay's mount and exec and its checks): {:+.1} ms (the second row's median less the first's).",
        (t.as_secs_f64() - r.as_secs_f64()) * 1e3
    );
}

/// The dry run's argv with the command as its own entrypoint: no relay mount, and
/// `--entrypoint RELAY IMAGE --receipt IDS -- ARGV0 ARGS` made `--entrypoint ARGV0 IMAGE ARGS`.
fn without_relay(argv: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        if argv[i] == "--mount" && argv[i + 1].contains("target=/run/agentguard/relay") {
            i += 2;
            continue;
        }
        if argv[i] == "--entrypoint" {
            let image = &argv[i + 2];
            let dash = argv[i..].iter().position(|a| a == "--").expect("--") + i;
            out.extend([
                "--entrypoint".to_owned(),
                argv[dash + 1].clone(),
                image.clone(),
            ]);
            out.extend(argv[dash + 2..].iter().cloned());
            return out;
        }
        out.push(argv[i].clone());
        i += 1;
    }
    panic!("no --entrypoint in {argv:?}")
}

/// The dry run's argv with the relay's mount source made `relay` (a run's own folder exists
/// only while it runs).
fn relay_from(argv: &[String], relay: &str) -> Vec<String> {
    let mut out = argv.to_vec();
    let at = out
        .iter()
        .position(|a| a.contains("target=/run/agentguard/relay"))
        .expect("the relay's mount");
    let options: Vec<String> = out[at]
        .split(',')
        .map(|o| match o.strip_prefix("source=") {
            Some(_) => format!("source={relay}"),
            None => o.to_owned(),
        })
        .collect();
    out[at] = options.join(",");
    out
}

/// The median `micros` of the `isolation_receipt` events in the log beside CONFIG.
fn receipt_micros(config: &str) -> u64 {
    let log = std::path::Path::new(config).with_file_name("audit.jsonl");
    let text = std::fs::read_to_string(&log).expect("the bench config's audit log");
    let mut micros: Vec<u64> = text
        .lines()
        .filter(|l| l.contains("\"kind\":\"isolation_receipt\""))
        .filter_map(|l| {
            let at = l.find("\"micros\":")? + "\"micros\":".len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        !micros.is_empty(),
        "no isolation_receipt in {}",
        log.display()
    );
    micros.sort_unstable();
    micros[micros.len() / 2]
}

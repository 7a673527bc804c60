//! Container overhead: `agentguard run` of a trivial allowlisted command against the raw
//! engine `run` with the same hardened argv (taken from `agentguard run --dry-run`, with the
//! command as its own entrypoint instead of the relay that takes the isolation receipt, whose
//! mount source exists only during a run, and behind the engine's `--init`, as before issue 37),
//! and the dry run's own argv with the relay mounted as the container's init taking the receipt
//! (the relay written by `agentguard k8s relay`), side by side; rounds alternating, medians of
//! wall time; the median time the receipt's checks took inside the container, from the runs'
//! audit log; and, inside one container under each runtime, a command behind Docker's init
//! against the same behind the relay, which is the receipt's cost per run without the
//! engine's noise.
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

    let (argv, receipt_argv) = argvs(&binary, &config);
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
    // Paired by round, so a drift of the machine between rounds cancels.
    let mut paired: Vec<f64> = raw
        .iter()
        .zip(&receipt)
        .map(|(r, t)| (t.as_secs_f64() - r.as_secs_f64()) * 1e3)
        .collect();
    paired.sort_by(f64::total_cmp);
    let quartile = |q: usize| paired[(paired.len() - 1) * q / 4];
    let (r, t, o) = (median(raw), median(receipt), median(ours));
    println!("| path | median wall time | ratio to raw |");
    println!("| --- | ---: | ---: |");
    println!(
        "| raw `{} run` with the same hardened argv, the command behind `--init` (baseline) | {:.0} ms | 1.00 |",
        argv[0],
        r.as_secs_f64() * 1e3
    );
    println!(
        "| the same raw run with the relay mounted as its init, taking the isolation receipt before `true` | {:.0} ms | {:.3} |",
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
    inside_rows(&receipt_argv);
    println!(
        "\n{rounds} alternating rounds of `true` in the busybox probe image. The relay as init with the receipt against the engine's init, each round's second row less its first: median {:+.1} ms, quartiles {:+.1} and {:+.1} ms.",
        quartile(2),
        quartile(1),
        quartile(3)
    );
}

/// The hardened argv of `noop` behind the engine's init, and the dry run's own argv with the
/// relay (written by `agentguard k8s relay` beside CONFIG) mounted as its init.
fn argvs(binary: &str, config: &str) -> (Vec<String>, Vec<String>) {
    let dry = Command::new(binary)
        .args(["run", "--config", config, "noop", "--dry-run"])
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
    let relay = std::path::Path::new(config).with_file_name("relay");
    let _ = std::fs::remove_file(&relay);
    let written = Command::new(binary)
        .args(["k8s", "relay"])
        .arg(&relay)
        .status()
        .expect("agentguard k8s relay");
    assert!(written.success(), "agentguard k8s relay failed");
    let receipt_argv = relay_from(&argv, &relay.to_string_lossy());
    (without_relay(argv), receipt_argv)
}

/// The rows of [`inside`], under each runtime.
fn inside_rows(receipt_argv: &[String]) {
    for runtime in [None, Some("runsc")] {
        let under = runtime.map_or(String::new(), |r| format!(" (`--runtime {r}`)"));
        let Some((engine, relayed)) = inside(receipt_argv, runtime) else {
            println!(
                "| inside one container{under}: SKIPPED, no {ENGINE_INIT} to compare with | | |"
            );
            continue;
        };
        println!(
            "| inside one container{under}: `/bin/busybox true` behind Docker's init (`docker-init -- ...`) | {engine:.2} ms | |"
        );
        println!(
            "| the same behind the relay taking the receipt (`relay --receipt UID:GID -- ...`) | {relayed:.2} ms | the receipt's cost per run: {:+.2} ms |",
            relayed - engine
        );
    }
}

/// The dry run's argv with the command as its own entrypoint behind the engine's init: no
/// relay mount, `--init`, and `--entrypoint RELAY IMAGE --receipt IDS -- ARGV0 ARGS` made
/// `--entrypoint ARGV0 IMAGE ARGS`.
fn without_relay(argv: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        if argv[i] == "--mount" && argv[i + 1].contains("target=/run/agentguard/relay") {
            i += 2;
            continue;
        }
        // Without the relay the engine's init is pid 1, as before issue 37.
        if argv[i] == "--rm" {
            out.extend(["--rm".to_owned(), "--init".to_owned()]);
            i += 1;
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

/// Blocks of this many runs each way inside one container, alternating.
const INSIDE_RUNS: u32 = 100;
const INSIDE_BLOCKS: u32 = 10;
/// Docker's init (a static tini), mounted beside the relay for the comparison.
const ENGINE_INIT: &str = "/usr/bin/docker-init";

/// Inside one hardened container with the relay and Docker's init mounted, the mean wall time
/// of `sh` running `/bin/busybox true` behind the engine's init (`docker-init -- ...`: what a
/// run's pid 1 did before the relay took its place) and behind the relay taking the receipt
/// (`relay --receipt UID:GID -- ...`), in milliseconds: what the receipt costs a run, without
/// the engine's noise around a whole run. The clock is `/proc/uptime` (10 ms), read only at
/// the ends of each block of [`INSIDE_RUNS`]; every run must succeed.
fn inside(receipt_argv: &[String], runtime: Option<&str>) -> Option<(f64, f64)> {
    let init = std::fs::canonicalize(ENGINE_INIT).ok()?;
    let at = receipt_argv
        .iter()
        .position(|a| a == "--entrypoint")
        .expect("--entrypoint");
    let image = &receipt_argv[at + 2];
    let ids = &receipt_argv[receipt_argv
        .iter()
        .position(|a| a == "--receipt")
        .expect("--receipt")
        + 1];
    let script = format!(
        "t() {{ read u _ < /proc/uptime; echo $u; }}; k=0; while [ $k -lt {INSIDE_BLOCKS} ]; do \
         a=$(t); i=0; while [ $i -lt {INSIDE_RUNS} ]; do /run/agentguard/init -- /bin/busybox true 2>/dev/null || exit 8; i=$((i+1)); done; b=$(t); \
         i=0; while [ $i -lt {INSIDE_RUNS} ]; do /run/agentguard/relay --receipt {ids} -- /bin/busybox true 2>/dev/null || exit 9; i=$((i+1)); done; c=$(t); \
         echo $a $b $c; k=$((k+1)); done"
    );
    let mut args: Vec<String> = receipt_argv[1..at].to_vec();
    let name = args.iter().position(|a| a == "--name").expect("--name") + 1;
    args[name] = format!("agentguard-bench-{}-inside", std::process::id());
    if let Some(runtime) = runtime {
        args.extend(["--runtime".to_owned(), runtime.to_owned()]);
    }
    args.extend([
        "--mount".into(),
        format!(
            "type=bind,source={},target=/run/agentguard/init,readonly",
            init.display()
        ),
        "--entrypoint".into(),
        "/bin/sh".into(),
        image.clone(),
        "-c".into(),
        script,
    ]);
    let out = Command::new(&receipt_argv[0])
        .args(&args)
        .output()
        .expect("the inside run");
    assert!(
        out.status.success(),
        "the inside run failed ({}): {} {}\n{args:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let (mut engine, mut relayed) = (0.0, 0.0);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let t: Vec<f64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        engine += t[1] - t[0];
        relayed += t[2] - t[1];
    }
    let runs = f64::from(INSIDE_RUNS * INSIDE_BLOCKS);
    Some((engine * 1e3 / runs, relayed * 1e3 / runs))
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

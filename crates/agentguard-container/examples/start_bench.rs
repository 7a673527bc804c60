//! Start of a fresh sandbox per call: `agentguard run` of `true` with `engine = "oci"` against
//! the raw `docker run` of the same image with the same hardened argv (taken from
//! `agentguard run --dry-run` on docker, with the relay mounted as its init taking the
//! isolation receipt, as an agentguard docker run does) and against `agentguard run` on
//! docker; under runc and under runsc; the image pinned by its ID (a cache hit asks no store)
//! and by its tag (Docker's store asked for the ID each run). Rounds alternate the peers;
//! medians of whole-process wall time. Then the first run after a cache miss (a fresh cache
//! each time), reported on its own.
//! Run it through `cargo xtask bench start`.
//!
//! Usage: start_bench AGENTGUARD_BINARY SCRATCH IMAGE [ROUNDS]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn timed(command: &mut Command) -> Duration {
    let start = Instant::now();
    let out = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{command:?} failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

fn median(mut xs: Vec<Duration>) -> f64 {
    xs.sort();
    xs[xs.len() / 2].as_secs_f64() * 1e3
}

/// A config of `noop` (`true`) for `engine` and `runtime` in its own folder.
fn config(scratch: &Path, name: &str, image: &str, engine: &str, runtime: &str) -> PathBuf {
    let dir = scratch.join(name);
    std::fs::create_dir_all(&dir).expect("scratch");
    let path = dir.join("agentguard.toml");
    let runtime = if runtime == "runc" && engine == "docker" {
        String::new()
    } else {
        format!("runtime = \"{runtime}\"\n")
    };
    std::fs::write(
        &path,
        format!(
            "image = \"{image}\"\nengine = \"{engine}\"\n{runtime}\n[commands]\nnoop = [\"true\"]\n"
        ),
    )
    .expect("config");
    path
}

/// The dry run's docker argv with the relay's mount source made a relay written by
/// `agentguard k8s relay` (a run's own folder exists only while it runs).
fn docker_argv(binary: &str, config: &Path) -> Vec<String> {
    let dry = Command::new(binary)
        .args(["run", "--config"])
        .arg(config)
        .args(["noop", "--dry-run"])
        .output()
        .expect("dry run");
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let relay = config.with_file_name("relay");
    let _ = std::fs::remove_file(&relay);
    let written = Command::new(binary)
        .args(["k8s", "relay"])
        .arg(&relay)
        .status()
        .expect("agentguard k8s relay");
    assert!(written.success(), "agentguard k8s relay failed");
    String::from_utf8_lossy(&dry.stdout)
        .split_whitespace()
        .map(|a| {
            if a.contains("target=/run/agentguard/relay") {
                let options: Vec<String> = a
                    .split(',')
                    .map(|o| match o.strip_prefix("source=") {
                        Some(_) => format!("source={}", relay.display()),
                        None => o.to_owned(),
                    })
                    .collect();
                options.join(",")
            } else {
                a.to_owned()
            }
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: start_bench AGENTGUARD_BINARY SCRATCH IMAGE [ROUNDS]";
    let binary = args.next().expect(usage);
    let scratch = PathBuf::from(args.next().expect(usage));
    let image = args.next().expect(usage);
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(15);
    let id = String::from_utf8(
        Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Id}}", &image])
            .output()
            .expect("docker image inspect")
            .stdout,
    )
    .expect("an image ID")
    .trim()
    .to_owned();
    println!("| runtime | path | median wall time | ratio to raw `docker run` |");
    println!("| --- | --- | ---: | ---: |");
    for runtime in ["runc", "runsc"] {
        runtime_rows(&binary, &scratch, &image, &id, runtime, rounds);
    }
    println!(
        "\n{rounds} rounds of `true` in {image}, the four peers alternating their order each round; the cache-miss rows are 5 runs each, with a fresh cache."
    );
}

/// The rows of one runtime: the four peers in alternating rounds, then the cache misses.
fn runtime_rows(binary: &str, scratch: &Path, image: &str, id: &str, runtime: &str, rounds: usize) {
    let cache = scratch.join("oci-cache");
    let docker = config(
        scratch,
        &format!("docker-{runtime}"),
        image,
        "docker",
        runtime,
    );
    let oci_id = config(scratch, &format!("oci-id-{runtime}"), id, "oci", runtime);
    let oci_tag = config(
        scratch,
        &format!("oci-tag-{runtime}"),
        image,
        "oci",
        runtime,
    );
    let raw = docker_argv(binary, &docker);
    let ours = |config: &Path| {
        let mut command = Command::new(binary);
        command
            .args(["run", "--config"])
            .arg(config)
            .arg("noop")
            .env("AGENTGUARD_OCI_CACHE", &cache);
        command
    };
    // Fill the cache first: these rows are cache hits.
    timed(&mut ours(&oci_id));
    let mut times: [Vec<Duration>; 4] = Default::default();
    for round in 0..rounds {
        let mut named = raw[1..].to_vec();
        let at = named.iter().position(|a| a == "--name").expect("--name") + 1;
        named[at] = format!("agentguard-bench-{}-raw{round}", std::process::id());
        let mut peers: [Command; 4] = [
            Command::new(&raw[0]),
            ours(&docker),
            ours(&oci_id),
            ours(&oci_tag),
        ];
        peers[0].args(&named);
        // Each round starts with another peer, so no one always follows the same one.
        for k in 0..4 {
            let i = (round + k) % 4;
            times[i].push(timed(&mut peers[i]));
        }
    }
    let [raw_t, docker_t, oci_id_t, oci_tag_t] = times.map(median);
    let row = |path: &str, ms: f64| {
        println!("| {runtime} | {path} | {ms:.0} ms | {:.2} |", ms / raw_t);
    };
    row(
        "raw `docker run` with the same hardened argv and the relay taking the receipt (baseline)",
        raw_t,
    );
    row("`agentguard run`, engine = \"docker\"", docker_t);
    row(
        "`agentguard run`, engine = \"oci\", image pinned by ID (cache hit, no store asked)",
        oci_id_t,
    );
    row(
        "`agentguard run`, engine = \"oci\", image by tag (Docker's store asked for the ID)",
        oci_tag_t,
    );
    // The first run after a miss: a fresh cache each time.
    let mut first = Vec::new();
    for round in 0..5 {
        let fresh = scratch.join(format!("oci-cache-miss-{runtime}-{round}"));
        let _ = std::fs::remove_dir_all(&fresh);
        let mut command = ours(&oci_id);
        command.env("AGENTGUARD_OCI_CACHE", &fresh);
        first.push(timed(&mut command));
        let _ = std::fs::remove_dir_all(&fresh);
    }
    row(
        "`agentguard run`, engine = \"oci\", the first run after a cache miss (save, verify, unpack; 5 runs)",
        median(first),
    );
}

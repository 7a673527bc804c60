//! `cargo xtask bench [NAME...]`: benchmarks against a baseline in the same run, written to
//! docs/PERFORMANCE.md.
//!
//! Each benchmark is a release-built program that alternates its baseline and ours over
//! several rounds and prints a Markdown table of medians and ratios. This task runs it and
//! replaces that benchmark's section of docs/PERFORMANCE.md (between `<!-- bench:NAME -->`
//! markers), stamped with the date and the machine's core count. Timings are never asserted
//! in tests; they are recorded here.

use std::fs;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// (name, package, example, what it compares).
const BENCHES: &[(&str, &str, &str, &str)] = &[
    (
        "audit",
        "agentguard-audit",
        "audit_bench",
        "Audit appends per second for each durability mode, against a baseline that serializes each event and writes and fdatasyncs it alone under a mutex (buffered and flush figures include the final flush of the file); and appends per second into one log from 8 writer processes against one, each with its own handle and file lock.",
    ),
    (
        "tunnel",
        "agentguard-egress",
        "proxy_bench",
        "Tunnel throughput: 1 GiB from a loopback TCP source on 127.0.0.2, read directly (the baseline) and through a CONNECT tunnel of the release `agentguard egress-proxy` binary, tinyproxy and squid, each its own process configured to allow the same CONNECT, and through HAProxy 2.6 in `mode tcp` (a relay that decides nothing, splicing forced both ways with 1 MiB pipes); each proxy's CPU time per GiB, the endpoints' (client and source) CPU per GiB, the whole machine's busy CPU per GiB (every core, so kernel work charged to no process counts too), and the proxy's system calls and context switches per GiB counted by `perf stat` over one more transfer. Client, source and proxies share the machine's cores.",
    ),
    (
        "connect",
        "agentguard-egress",
        "proxy_bench",
        "Connection setup: sequential CONNECT-to-200 round trips (connect, CONNECT, read the 200, close) against a direct TCP connect, tinyproxy, squid and HAProxy in `mode tcp`, all dialing one upstream that answers a request head with a 200 (HAProxy relays the CONNECT to it, so the client's round trip is the same) and closes when its client does; with each proxy's CPU, system calls and context switches per round trip. agentguard resolves the name through a warm resolver (the test DNS answers with a TTL); the others are given the IP. Two methods in the same rounds: the benchmark's own tokio client, and a plain sequential Python client with blocking sockets, a process of its own (`sequential_client.py`). agentguard is measured twice: without an audit log, and with `--audit` (flush durability, the CLI's), whose log must hold an event for every decision.",
    ),
    (
        "tunnel-tls",
        "agentguard-egress",
        "proxy_bench",
        "Tunnel throughput with the TLS name check on: as `tunnel`, with the source on port 443 and every client sending a real ClientHello (made by rustls) after the 200, which agentguard reads and checks before it splices; the other proxies forward it.",
    ),
    (
        "connect-tls",
        "agentguard-egress",
        "proxy_bench",
        "Connection setup with the TLS name check on: as `connect`, to port 443, each round trip sending a ClientHello after the 200 before it closes.",
    ),
    (
        "idle",
        "agentguard-egress",
        "proxy_bench",
        "Concurrency: 10,000 idle tunnels asked of the release `agentguard egress-proxy` with its default limits: how many it holds (the cap it derives from the descriptor limit), how fast it refuses the rest, its resident memory and file descriptors per tunnel (from /proc), and that all of them are closed once their clients close.",
    ),
    (
        "reload",
        "agentguard-egress",
        "proxy_bench",
        "Live policy: sequential CONNECT-to-200 decisions per second through the release `agentguard egress-proxy --policy FILE` reloaded by SIGHUP every 100 ms while it is measured (its file alternating between two policies that both allow the target), against the same proxy left alone, in the same rounds; both with an audit log.",
    ),
    (
        "container",
        "agentguard-container",
        "run_bench",
        "Container overhead: `agentguard run` of a trivial allowlisted command (`true` in the busybox probe image, docker with its default runtime, an audit log) against the raw `docker run` with the same hardened argv, taken from `agentguard run --dry-run` with the command as its own entrypoint (no relay, so no isolation receipt); the same raw argv with the relay mounted and taking the receipt (the relay from `agentguard k8s relay`), in the same rounds, for the receipt's whole cost per run; and the receipt's checks timed inside the container.",
    ),
    (
        "start",
        "agentguard-container",
        "start_bench",
        "A fresh sandbox per call: `agentguard run` of `true` (busybox probe image, release binary) with `engine = \"oci\"` (runc or runsc called directly) against the raw `docker run` of the same image with the same hardened argv and the relay taking the receipt, and against `agentguard run` on docker; under runc and runsc; rounds alternating the peers' order; whole-process medians. The OCI image pinned by ID is a cache hit that asks no store; by tag, Docker's store is asked for the ID. The first run after a cache miss is timed on its own.",
    ),
    (
        "egress",
        "agentguard-sandbox",
        "egress_bench",
        "The cost of `network = \"egress\"` (docker, default runtime, release binary): `agentguard run` of `true` in the busybox probe image with its own proxy and relay against the same command with `network = \"none\"`, alternating; and a 256 MiB download by a Python client inside the container through the relay and the run's proxy against the same client on the host through `agentguard egress-proxy`, each timing its data phase.",
    ),
    (
        "mcp",
        "agentguard-mcp",
        "mcp_bench",
        "MCP: a tool call of `true` (busybox probe image, docker) through a warm release `agentguard mcp`, from a JSON-RPC client in the benchmark, against `agentguard run` of the same command, alternating; the server's start to its `tools/list` answer; and tool calls per second with 8 in flight through one warm server on each engine and runtime (docker and `engine = \"oci\"`, runc and runsc).",
    ),
    (
        "fetch",
        "agentguard-netpin",
        "fetch_bench",
        "Fetch: `agentguard fetch` of a small HTTPS resource from a loopback TLS server with a test CA, against `curl --resolve` doing the same; both are whole processes.",
    ),
];

/// The arguments of the `container` and `mcp` benchmarks: `noop` (`true` in the busybox probe
/// image, docker) run 41 or 15 times each way; for `mcp` also each engine's config.
fn container_args(name: &str, scratch: &std::path::Path) -> Result<Vec<String>> {
    crate::image::ensure_probe_image("docker")?;
    let dir = scratch.join(name);
    std::fs::create_dir_all(&dir)?;
    // The receipts timed are this run's only.
    let _ = std::fs::remove_file(dir.join("audit.jsonl"));
    let config = dir.join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"{}\"\nengine = \"docker\"\n\n[commands]\nnoop = [\"true\"]\n{}",
            crate::image::PROBE_IMAGE,
            // The container benchmark reads the receipts' times from the log.
            if name == "container" {
                "\n[audit]\npath = \"audit.jsonl\"\n"
            } else {
                ""
            }
        ),
    )?;
    let binary = release_binary()?;
    let mut args = vec![
        binary.to_string_lossy().into_owned(),
        config.to_string_lossy().into_owned(),
        // The receipt's few milliseconds need more rounds than the MCP medians.
        if name == "container" { "41" } else { "15" }.into(),
    ];
    if name == "mcp" {
        args.extend(mcp_engines(&dir)?);
    }
    Ok(args)
}

/// `LABEL=CONFIG` of `noop` for each engine and runtime the MCP throughput compares.
fn mcp_engines(dir: &std::path::Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (label, engine, runtime) in [
        ("docker+runc", "docker", ""),
        ("docker+runsc", "docker", "runsc"),
        ("oci+runc", "oci", "runc"),
        ("oci+runsc", "oci", "runsc"),
    ] {
        let config = dir.join(format!("{}.toml", label.replace('+', "-")));
        let runtime = match runtime {
            "" => String::new(),
            r => format!("runtime = \"{r}\"\n"),
        };
        std::fs::write(
            &config,
            format!(
                "image = \"{}\"\nengine = \"{engine}\"\n{runtime}\n[commands]\nnoop = [\"true\"]\n",
                crate::image::PROBE_IMAGE
            ),
        )?;
        out.push(format!("{label}={}", config.display()));
    }
    Ok(out)
}

/// Builds the release `agentguard` binary that the benchmarks measure; returns its path.
fn release_binary() -> Result<std::path::PathBuf> {
    cmd::run(
        "cargo",
        &[
            "build",
            "--quiet",
            "--release",
            "--package",
            "agentguard-cli",
        ],
    )?;
    Ok(cmd::target_dir().join("release/agentguard"))
}

/// The arguments each benchmark program takes after `--`.
fn bench_args(name: &str, scratch: &std::path::Path) -> Result<Vec<String>> {
    Ok(match name {
        "tunnel" | "connect" | "tunnel-tls" | "connect-tls" | "idle" | "reload" => {
            install_peers()?;
            let binary = release_binary()?;
            let mode = match name {
                "tunnel" => "throughput",
                "connect" => "setup",
                "tunnel-tls" => "throughput-tls",
                "connect-tls" => "setup-tls",
                "reload" => "reload",
                _ => "idle",
            };
            let mut args = vec![mode.into(), binary.to_string_lossy().into_owned()];
            // Before and after in one run: the binary of an earlier commit, side by side.
            if let Some(before) = std::env::var_os("AGENTGUARD_BENCH_BEFORE")
                && !matches!(name, "idle" | "reload")
            {
                args.push(format!("the binary before={}", before.to_string_lossy()));
            }
            args
        }
        "container" | "mcp" => container_args(name, scratch)?,
        "egress" => {
            crate::image::ensure_probe_image("docker")?;
            crate::image::ensure_pytest_image("docker")?;
            let binary = release_binary()?;
            vec![
                binary.to_string_lossy().into_owned(),
                scratch.to_string_lossy().into_owned(),
                crate::image::PROBE_IMAGE.into(),
                crate::image::PYTEST_IMAGE.into(),
                "15".into(),
            ]
        }

        "start" => {
            crate::image::ensure_probe_image("docker")?;
            let binary = release_binary()?;
            let dir = scratch.join("start");
            std::fs::create_dir_all(&dir)?;
            vec![
                binary.to_string_lossy().into_owned(),
                dir.to_string_lossy().into_owned(),
                crate::image::PROBE_IMAGE.into(),
                "21".into(),
            ]
        }
        "fetch" => {
            let binary = release_binary()?;
            vec![binary.to_string_lossy().into_owned(), "30".into()]
        }
        _ => vec![scratch.to_string_lossy().into_owned()],
    })
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let selected: Vec<&(&str, &str, &str, &str)> = if args.is_empty() {
        BENCHES.iter().collect()
    } else {
        args.iter()
            .map(|a| {
                BENCHES.iter().find(|b| b.0 == a).with_context(|| {
                    format!(
                        "unknown benchmark {a:?}; known: {}",
                        BENCHES.iter().map(|b| b.0).collect::<Vec<_>>().join(", ")
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    let doc_path = cmd::root().join("docs/PERFORMANCE.md");
    let mut doc = fs::read_to_string(&doc_path).context("reading docs/PERFORMANCE.md")?;
    let date = cmd::stdout_text(&cmd::output("date", &["-u", "+%Y-%m-%d"])?);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let scratch = cmd::root().join("target/bench");
    for (name, package, example, what) in selected {
        println!("== bench {name}");
        let output = Command::new("cargo")
            .args([
                "run",
                "--quiet",
                "--release",
                "--package",
                package,
                "--example",
                example,
                "--",
            ])
            .args(bench_args(name, &scratch)?)
            .current_dir(cmd::root())
            .output()
            .with_context(|| format!("running benchmark {name}"))?;
        if !output.status.success() {
            bail!(
                "benchmark {name} failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let table = String::from_utf8_lossy(&output.stdout);
        print!("{table}");
        let section = format!(
            "<!-- bench:{name} -->\n{what}\n\nMeasured {date} on {cores} cores with `cargo xtask bench {name}` (medians of alternating rounds).\n\n{table}<!-- /bench:{name} -->"
        );
        doc = replace_section(&doc, name, &section);
    }
    fs::write(&doc_path, doc).context("writing docs/PERFORMANCE.md")?;
    println!("updated docs/PERFORMANCE.md");
    Ok(())
}

/// Installs tinyproxy, squid and HAProxy from Debian's packages when they are missing, and stops the
/// services the packages start, so the benchmark runs its own instances.
fn install_peers() -> Result<()> {
    let missing: Vec<&str> = [
        ("tinyproxy", "/usr/bin/tinyproxy"),
        ("squid", "/usr/sbin/squid"),
        ("haproxy", "/usr/sbin/haproxy"),
    ]
    .iter()
    .filter(|(_, path)| !std::path::Path::new(path).exists())
    .map(|(package, _)| *package)
    .collect();
    if !missing.is_empty() {
        println!("   installing the benchmark peers: {}", missing.join(" "));
        let mut args = vec!["install", "-y", "-q"];
        args.extend(&missing);
        let status = Command::new("apt-get")
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?;
        if !status.success() {
            bail!(
                "installing {} failed; install them by hand (apt-get install {})",
                missing.join(" "),
                missing.join(" ")
            );
        }
    }
    for service in ["tinyproxy", "squid", "haproxy"] {
        let _ = cmd::output("pkill", &["-x", service]);
    }
    Ok(())
}

/// Replaces the marked section, or appends it when the document has none yet.
fn replace_section(doc: &str, name: &str, section: &str) -> String {
    let start = format!("<!-- bench:{name} -->");
    let end = format!("<!-- /bench:{name} -->");
    match (doc.find(&start), doc.find(&end)) {
        (Some(s), Some(e)) if e > s => format!("{}{section}{}", &doc[..s], &doc[e + end.len()..]),
        _ => format!("{}\n\n{section}\n", doc.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sections_are_replaced_in_place_or_appended() {
        let doc = "# P\n\n<!-- bench:a -->\nold\n<!-- /bench:a -->\n\ntail\n";
        assert_eq!(
            super::replace_section(doc, "a", "<!-- bench:a -->\nnew\n<!-- /bench:a -->"),
            "# P\n\n<!-- bench:a -->\nnew\n<!-- /bench:a -->\n\ntail\n"
        );
        assert_eq!(super::replace_section("# P\n", "b", "S"), "# P\n\nS\n");
    }
}

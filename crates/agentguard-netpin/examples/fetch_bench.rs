//! Fetch: `agentguard fetch` of a small HTTPS resource from a loopback TLS server against
//! `curl --resolve` doing the same (both are whole processes: resolve, TLS with verification,
//! one GET), rounds alternating, medians of wall time. Run it through `cargo xtask bench fetch`.
//!
//! Usage: fetch_bench AGENTGUARD_BINARY [ROUNDS]

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentguard_test_support::{FakeDns, TestCa, TlsUpstream};

const UPSTREAM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn timed(mut command: Command) -> Duration {
    // Neither client may pick up a CA bundle or a proxy from this machine's environment.
    agentguard_test_support::clean_client_env(&mut command);
    let start = Instant::now();
    let out = command
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .expect("run");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from 127.0.0.2\n"
    );
    elapsed
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let binary = args
        .next()
        .expect("usage: fetch_bench AGENTGUARD_BINARY [ROUNDS]");
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(30);
    let dns = FakeDns::start().await;
    dns.answer("pkgs.example.test", &[UPSTREAM]);
    let ca = TestCa::new("fetch bench CA");
    let upstream = TlsUpstream::start(UPSTREAM, 0, ca.server_config(&["pkgs.example.test"])).await;
    let port = upstream.addr().port();
    let ca_file =
        std::env::temp_dir().join(format!("agentguard-fetch-bench-{}.pem", std::process::id()));
    std::fs::write(&ca_file, ca.pem()).expect("CA file");
    let url = format!("https://pkgs.example.test:{port}/");

    let (mut curl, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut c = Command::new("curl");
        c.args([
            "--silent",
            "--show-error",
            "--resolve",
            &format!("pkgs.example.test:{port}:127.0.0.2"),
            "--cacert",
        ])
        .arg(&ca_file)
        .arg(&url);
        curl.push(tokio::task::block_in_place(|| timed(c)));
        let mut a = Command::new(&binary);
        a.args([
            "fetch",
            &url,
            "--allow",
            "pkgs.example.test",
            "--allow-port",
            &port.to_string(),
            "--allow-cidr",
            "127.0.0.2/32",
        ])
        .args(["--nameserver", &dns.addr().to_string(), "--ca-file"])
        .arg(&ca_file);
        ours.push(tokio::task::block_in_place(|| timed(a)));
    }
    let _ = std::fs::remove_file(&ca_file);
    let (c, o) = (median(curl), median(ours));
    println!("| path | median wall time | ratio to curl |");
    println!("| --- | ---: | ---: |");
    println!(
        "| `curl --resolve` (baseline) | {:.1} ms | 1.00 |",
        c.as_secs_f64() * 1e3
    );
    println!(
        "| `agentguard fetch` (DNS through the test server, then pinned) | {:.1} ms | {:.2} |",
        o.as_secs_f64() * 1e3,
        o.as_secs_f64() / c.as_secs_f64()
    );
    println!(
        "\n{rounds} alternating rounds; each is a whole process: start, resolve, TLS with verification, one GET."
    );
}

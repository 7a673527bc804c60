//! The `setup` and `setup-tls` modes: sequential CONNECT-to-200 round trips per second through
//! each proxy against a direct TCP connect, with each proxy's CPU, system calls and context
//! switches per round trip.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use agentguard_test_support::FakeDns;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::peers::{Proxy, Trace, median, percentile, proxies};
use crate::{SETUP_CONNECTIONS, SETUP_ROUNDS, SOURCE_IP, connect_via, direct, source_port};

/// Sequential round trips: returns (per second, p50, p99).
pub(crate) async fn round_trips(n: usize, mut one: impl AsyncFnMut()) -> (f64, Duration, Duration) {
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        one().await;
        latencies.push(t.elapsed());
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    latencies.sort();
    (
        rate,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
    )
}

/// The upstream of every path in the setup modes, on `port`. To a request head (HAProxy relays
/// the client's CONNECT) it answers 200 as a CONNECT proxy would; it reads (and drops) what
/// follows, such as a ClientHello, and closes when its client does, as a server does. Every
/// path meets the same upstream doing the same work per connection.
pub(crate) async fn responder(port: u16) -> SocketAddr {
    let listener = TcpListener::bind((SOURCE_IP, port))
        .await
        .expect("bind responder");
    let addr = listener.local_addr().expect("responder address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let reply = b"HTTP/1.1 200 Connection established\r\n\r\n";
                if stream.write_all(reply).await.is_ok() {
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                }
            });
        }
    });
    addr
}

pub(crate) async fn setup(binary: &str, extra: &[String], dir: &Path) {
    let dns = FakeDns::start().await;
    dns.answer_with_ttl("bulk.example.test", &[SOURCE_IP], 300);
    let upstream = responder(source_port()).await;
    let all = proxies(binary, extra, dns.addr(), upstream.port(), upstream, dir);
    // A relay forwards the CONNECT to its responder, which answers it.
    let targets: Vec<String> = all
        .iter()
        .map(|p| {
            p.target(upstream.port())
                .unwrap_or_else(|| format!("{SOURCE_IP}:{}", upstream.port()))
        })
        .collect();
    // Warm up: the resolver cache, the proxies' first-connection paths.
    for (proxy, target) in all.iter().zip(&targets) {
        drop(connect_via(proxy.addr, target).await);
    }
    let mut base = Vec::new();
    let mut results: Vec<Vec<(f64, Duration, Duration)>> = vec![Vec::new(); all.len()];
    let mut cpu = vec![0.0; all.len()];
    for round in 0..SETUP_ROUNDS {
        base.push(round_trips(SETUP_CONNECTIONS, async || drop(direct(upstream).await)).await);
        // Each round starts with the next path, so no path always runs first.
        for k in 0..all.len() {
            let i = (round + k) % all.len();
            let (proxy, target) = (&all[i], &targets[i]);
            let before = proxy.cpu_seconds();
            results[i].push(
                round_trips(SETUP_CONNECTIONS, async || {
                    drop(connect_via(proxy.addr, target).await)
                })
                .await,
            );
            cpu[i] += proxy.cpu_seconds() - before;
        }
    }
    // One more round each, with perf counting the proxy's system calls and switches.
    let mut traces = Vec::new();
    for (proxy, target) in all.iter().zip(&targets) {
        let trace = Trace::attach(proxy.child.id());
        round_trips(SETUP_CONNECTIONS, async || {
            drop(connect_via(proxy.addr, target).await)
        })
        .await;
        traces.push(trace.and_then(Trace::finish));
    }
    print_setup(&all, extra.len(), base, results, cpu, traces);
}

/// The setup table: medians of each path's rounds, the proxy's CPU per round trip, the traced
/// round's system calls and switches, and agentguard's rate against each peer.
fn print_setup(
    all: &[Proxy],
    extra: usize,
    base: Vec<(f64, Duration, Duration)>,
    results: Vec<Vec<(f64, Duration, Duration)>>,
    cpu: Vec<f64>,
    traces: Vec<Option<(u64, u64)>>,
) {
    let summarize = |runs: Vec<(f64, Duration, Duration)>| {
        let rate = median(runs.iter().map(|r| r.0).collect());
        let p50 = median(runs.iter().map(|r| r.1.as_secs_f64() * 1e6).collect());
        let p99 = median(runs.iter().map(|r| r.2.as_secs_f64() * 1e6).collect());
        (rate, p50, p99)
    };
    let (b, b50, b99) = summarize(base);
    println!(
        "| path | round trips/s | p50 us | p99 us | rate vs direct | proxy CPU us per round trip | proxy system calls per round trip | proxy context switches per round trip |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!("| direct TCP connect (baseline) | {b:.0} | {b50:.0} | {b99:.0} | 1.00 | - | - | - |");
    let total = (SETUP_CONNECTIONS * SETUP_ROUNDS) as f64;
    let per = |n: u64| format!("{:.1}", n as f64 / SETUP_CONNECTIONS as f64);
    let mut rates = Vec::new();
    for (((proxy, runs), cpu), trace) in all.iter().zip(results).zip(cpu).zip(traces) {
        let (r, p50, p99) = summarize(runs);
        rates.push(r);
        let (calls, switches) = Trace::cells(trace, per);
        println!(
            "| CONNECT to 200 through {} | {r:.0} | {p50:.0} | {p99:.0} | {:.2} | {:.0} | {calls} | {switches} |",
            proxy.label,
            r / b,
            cpu * 1e6 / total
        );
    }
    let against: Vec<String> = all
        .iter()
        .zip(&rates)
        .skip(1 + extra)
        .map(|(p, r)| format!("{:.2}x {}", rates[0] / r, p.label))
        .collect();
    println!(
        "\n{SETUP_CONNECTIONS} sequential round trips per round, {SETUP_ROUNDS} rounds, each starting with the next path (medians); system calls and switches from `perf stat` over one more round each. `agentguard egress-proxy` in this run: {}.",
        against.join(", ")
    );
}

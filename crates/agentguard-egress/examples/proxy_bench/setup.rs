//! The `setup` and `setup-tls` modes: sequential CONNECT-to-200 round trips per second through
//! each proxy against a direct TCP connect, with each proxy's CPU, system calls and context
//! switches per round trip.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentguard_test_support::FakeDns;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::peers::{Proxy, Trace, median, percentile, proxies, start_agentguard_with};
use crate::{SETUP_CONNECTIONS, SETUP_ROUNDS, SOURCE_IP, TLS, connect_via, direct, source_port};

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

/// The setup modes' fixtures, left running: the test DNS answering `bulk.example.test` and the
/// responder, both printed.
pub(crate) async fn serve() {
    let dns = FakeDns::start().await;
    dns.answer_with_ttl("bulk.example.test", &[SOURCE_IP], 300);
    let upstream = responder(source_port()).await;
    println!("dns {} upstream {upstream}", dns.addr());
    std::future::pending::<()>().await;
}

/// (per second, p50, p99) of each round.
type Runs = Vec<(f64, Duration, Duration)>;

/// The two methods: the benchmark's own tokio client, and a plain sequential Python client
/// (blocking sockets, a process of its own: `sequential_client.py`).
enum Client {
    Rust,
    Python(PathBuf),
}

impl Client {
    fn name(&self) -> &'static str {
        match self {
            Client::Rust => "the Rust (tokio) client",
            Client::Python(_) => "the sequential Python client",
        }
    }

    /// [`SETUP_CONNECTIONS`] round trips through `addr`: CONNECT `target` and the 200, or with
    /// no target a plain connect and close (the direct baseline).
    async fn round_trips(
        &self,
        addr: SocketAddr,
        target: Option<&str>,
    ) -> (f64, Duration, Duration) {
        match (self, target) {
            (Client::Rust, None) => {
                round_trips(SETUP_CONNECTIONS, async || drop(direct(addr).await)).await
            }
            (Client::Rust, Some(t)) => {
                round_trips(SETUP_CONNECTIONS, async || drop(connect_via(addr, t).await)).await
            }
            (Client::Python(script), _) => python_round_trips(script, addr, target).await,
        }
    }
}

/// Round trips the Python client makes before it starts its clock.
const PYTHON_WARM_UP: usize = 20;

/// Runs the Python client (`AGENTGUARD_BENCH_PYTHON`, else `python3`) for one round; it warms
/// up with [`PYTHON_WARM_UP`] round trips and times the rest itself, so its start is not
/// counted.
async fn python_round_trips(
    script: &Path,
    addr: SocketAddr,
    target: Option<&str>,
) -> (f64, Duration, Duration) {
    let python = std::env::var_os("AGENTGUARD_BENCH_PYTHON").unwrap_or_else(|| "python3".into());
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg(target.unwrap_or("-"))
        .arg(SETUP_CONNECTIONS.to_string())
        .arg(PYTHON_WARM_UP.to_string());
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the Python client's thread")
        .expect("run the Python client (python3)");
    assert!(
        out.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<f64> = text
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    assert_eq!(fields.len(), 3, "the Python client printed {text:?}");
    let us = |f: f64| Duration::from_secs_f64(f / 1e6);
    (fields[0], us(fields[1]), us(fields[2]))
}

/// One client's measurements: the direct baseline's rounds, each path's rounds, and each
/// proxy's CPU seconds over its rounds.
struct Measured {
    base: Runs,
    paths: Vec<Runs>,
    cpu: Vec<f64>,
}

pub(crate) async fn setup(binary: &str, extra: &[String], dir: &Path) {
    let dns = FakeDns::start().await;
    dns.answer_with_ttl("bulk.example.test", &[SOURCE_IP], 300);
    let upstream = responder(source_port()).await;
    let mut all = proxies(binary, extra, dns.addr(), upstream.port(), upstream, dir);
    // The same proxy recording every decision in flush mode (the CLI's durability).
    let log = dir.join("setup-audit.jsonl");
    let audit = [OsStr::new("--audit"), log.as_os_str()];
    let label = "`agentguard egress-proxy --audit` (flush)";
    let port = upstream.port();
    all.insert(
        1,
        start_agentguard_with(label, binary, dns.addr(), port, Some("20000"), &audit),
    );
    // A relay forwards the CONNECT to its responder, which answers it.
    let targets: Vec<String> = all
        .iter()
        .map(|p| {
            p.target(port)
                .unwrap_or_else(|| format!("{SOURCE_IP}:{port}"))
        })
        .collect();
    // Warm up: the resolver cache, the proxies' first-connection paths.
    for (proxy, target) in all.iter().zip(&targets) {
        drop(connect_via(proxy.addr, target).await);
    }
    // The Python client sends no ClientHello, so it measures the plain mode only.
    let mut clients = vec![Client::Rust];
    if TLS.get().is_none() {
        let script = dir.join("sequential_client.py");
        std::fs::write(&script, include_str!("sequential_client.py")).expect("write the client");
        clients.push(Client::Python(script));
    }
    let measured = measure(&clients, &all, &targets, upstream).await;
    // One more round each, with perf counting the proxy's system calls and switches.
    let mut traces = Vec::new();
    for (proxy, target) in all.iter().zip(&targets) {
        let trace = Trace::attach(proxy.child.id());
        Client::Rust.round_trips(proxy.addr, Some(target)).await;
        traces.push(trace.and_then(Trace::finish));
    }
    let mut traces = Some(traces);
    let mut ratios = Vec::new();
    for (client, m) in clients.iter().zip(measured) {
        let rates = print_setup(client, &all, m, traces.take());
        ratios.push(summary(client, &all, extra.len(), &rates));
    }
    // Every connection the audited proxy saw has its decision in the log: the warm-up's, each
    // round's (the Python client's with its own warm-up), the traced round's.
    let text = std::fs::read_to_string(&log).expect("the audited proxy's log");
    let connects = text
        .lines()
        .filter(|l| l.contains("\"kind\":\"egress_connect\""))
        .count();
    let python = (clients.len() - 1) * SETUP_ROUNDS * (SETUP_CONNECTIONS + PYTHON_WARM_UP);
    let expected = 1 + (SETUP_ROUNDS + 1) * SETUP_CONNECTIONS + python;
    assert_eq!(connects, expected, "decisions in the audited proxy's log");
    println!(
        "{SETUP_CONNECTIONS} sequential round trips per round, {SETUP_ROUNDS} rounds, each starting with the next client and path (medians); system calls and switches from `perf stat` over one more round each of the Rust client. `agentguard egress-proxy` in this run: {}. The audited proxy's log holds {} events, a decision for each of its {connects} connections and their closes.",
        ratios.join("; "),
        text.lines().count()
    );
}

/// Every round: each client's direct baseline, then each path, each round starting with the
/// next client and the next path, so none always runs first.
async fn measure(
    clients: &[Client],
    all: &[Proxy],
    targets: &[String],
    upstream: SocketAddr,
) -> Vec<Measured> {
    let mut measured: Vec<Measured> = (0..clients.len())
        .map(|_| Measured {
            base: Vec::new(),
            paths: vec![Vec::new(); all.len()],
            cpu: vec![0.0; all.len()],
        })
        .collect();
    for round in 0..SETUP_ROUNDS {
        // Each round starts with the next client and the next path, so none always runs first.
        for c in 0..clients.len() {
            let c = (round + c) % clients.len();
            let (client, m) = (&clients[c], &mut measured[c]);
            m.base.push(client.round_trips(upstream, None).await);
            for k in 0..all.len() {
                let i = (round + k) % all.len();
                let before = all[i].cpu_seconds();
                m.paths[i].push(client.round_trips(all[i].addr, Some(&targets[i])).await);
                m.cpu[i] += all[i].cpu_seconds() - before;
            }
        }
    }
    measured
}

/// What agentguard made against each peer, and with `--audit` against without.
fn summary(client: &Client, all: &[Proxy], extra: usize, rates: &[f64]) -> String {
    let against: Vec<String> = all
        .iter()
        .zip(rates)
        .skip(2 + extra)
        .map(|(p, r)| format!("{:.2}x {}", rates[0] / r, p.label))
        .collect();
    format!(
        "with {}, {}, and {:.2} of its rate with `--audit` (flush)",
        client.name(),
        against.join(", "),
        rates[1] / rates[0]
    )
}

/// One client's table: medians of each path's rounds, the proxy's CPU per round trip, and the
/// traced round's system calls and switches when given; returns each path's rate.
fn print_setup(
    client: &Client,
    all: &[Proxy],
    m: Measured,
    traces: Option<Vec<Option<(u64, u64)>>>,
) -> Vec<f64> {
    let summarize = |runs: Runs| {
        let rate = median(runs.iter().map(|r| r.0).collect());
        let p50 = median(runs.iter().map(|r| r.1.as_secs_f64() * 1e6).collect());
        let p99 = median(runs.iter().map(|r| r.2.as_secs_f64() * 1e6).collect());
        (rate, p50, p99)
    };
    let (b, b50, b99) = summarize(m.base);
    let counted = traces.is_some();
    let mut traces = traces.unwrap_or_default().into_iter();
    println!("With {}:\n", client.name());
    let more = if counted {
        " proxy system calls per round trip | proxy context switches per round trip |"
    } else {
        ""
    };
    println!(
        "| path | round trips/s | p50 us | p99 us | rate vs direct | proxy CPU us per round trip |{more}"
    );
    println!(
        "| --- | ---: | ---: | ---: | ---: | ---: |{}",
        if counted { " ---: | ---: |" } else { "" }
    );
    println!(
        "| direct TCP connect (baseline) | {b:.0} | {b50:.0} | {b99:.0} | 1.00 | - |{}",
        if counted { " - | - |" } else { "" }
    );
    let total = (SETUP_CONNECTIONS * SETUP_ROUNDS) as f64;
    let per = |n: u64| format!("{:.1}", n as f64 / SETUP_CONNECTIONS as f64);
    let mut rates = Vec::new();
    for ((proxy, runs), cpu) in all.iter().zip(m.paths).zip(m.cpu) {
        let (r, p50, p99) = summarize(runs);
        rates.push(r);
        let counts = match traces.next() {
            Some(trace) => {
                let (calls, switches) = Trace::cells(trace, per);
                format!(" {calls} | {switches} |")
            }
            None => String::new(),
        };
        println!(
            "| CONNECT to 200 through {} | {r:.0} | {p50:.0} | {p99:.0} | {:.2} | {:.0} |{counts}",
            proxy.label,
            r / b,
            cpu * 1e6 / total
        );
    }
    println!();
    rates
}

//! Proxy benchmarks, side by side with what users would pick instead: the release
//! `agentguard egress-proxy` binary, tinyproxy, squid and HAProxy, each a process of its own,
//! against a baseline without any proxy, rounds alternating between them.
//!
//! * `throughput`: bytes from a loopback TCP source on 127.0.0.2 read directly, and through a
//!   CONNECT tunnel of each proxy; also each proxy's CPU time (user + system, from /proc) per
//!   GiB moved.
//! * `setup`: sequential CONNECT-to-200 round trips (connect, send CONNECT, read the 200,
//!   close) per second with p50/p99 latency, against a direct TCP connect; agentguard resolves
//!   the name through a warm resolver (the test DNS answers with a TTL), the others get an IP.
//!
//! * `throughput-tls`, `setup-tls`: the same with the source on port 443, where agentguard
//!   checks the ClientHello's name: every client sends a real ClientHello (made by rustls) after
//!   the 200, directly too, and the other proxies and binaries simply forward it.
//! * `idle`: 10,000 idle tunnels asked of agentguard with its default limits: how many it
//!   holds (the cap it derives from the descriptor limit), how fast it refuses the rest, its
//!   resident memory and open file descriptors per tunnel, and that every one closes cleanly
//!   afterwards.
//! * `reload`: CONNECT-to-200 decisions per second through a proxy whose policy file is
//!   reloaded by SIGHUP every 100 ms, against the same proxy left alone, in the same rounds.
//!
//! * `serve`: the setup modes' test DNS and responder, printed and left running (profiling).
//!
//! Markdown tables go to stdout for docs/PERFORMANCE.md. Run through `cargo xtask bench`.
//!
//! Usage: proxy_bench throughput|setup|idle|reload AGENTGUARD_BINARY [LABEL=OTHER_AGENTGUARD_BINARY...]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use agentguard_test_support::FakeDns;

mod peers;
mod reload;
mod setup;

use peers::{Proxy, Trace, machine_cpu_seconds, median, proxies, start_agentguard_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SOURCE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const CHUNK: usize = 256 * 1024;
const THROUGHPUT_MIB: u64 = 1024;
const THROUGHPUT_ROUNDS: usize = 5;
const SETUP_CONNECTIONS: usize = 2000;
const SETUP_ROUNDS: usize = 9;

/// A source on `port` (0 for a free one) that writes `bytes` to every connection, then closes.
/// It reads (and drops) whatever the client sends, such as a ClientHello: closing with unread
/// bytes would reset the connection instead of ending it.
async fn source(bytes: u64, port: u16) -> SocketAddr {
    let listener = TcpListener::bind((SOURCE_IP, port))
        .await
        .expect("bind source (port 443 needs root)");
    let addr = listener.local_addr().expect("source address");
    tokio::spawn(async move {
        let data = vec![0x5au8; CHUNK];
        while let Ok((stream, _)) = listener.accept().await {
            let data = data.clone();
            let (mut from_client, mut stream) = stream.into_split();
            tokio::spawn(async move {
                let mut sink = vec![0u8; 16 * 1024];
                while matches!(from_client.read(&mut sink).await, Ok(n) if n > 0) {}
            });
            tokio::spawn(async move {
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(CHUNK as u64) as usize;
                    if stream.write_all(&data[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

async fn drain(
    mut stream: TcpStream,
    start: Instant,
    expect: u64,
    already: u64,
    label: &str,
) -> f64 {
    let mut buf = vec![0u8; CHUNK];
    let mut total = already;
    loop {
        let n = stream.read(&mut buf).await.expect("read");
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    assert_eq!(total, expect, "short read through {label}");
    total as f64 / (1024.0 * 1024.0) / start.elapsed().as_secs_f64()
}

/// Connects through a proxy and reads its reply head; returns the stream after a 200 and how
/// many tunnel bytes arrived in the same reads as the head.
async fn connect_via(proxy: SocketAddr, target: &str) -> (TcpStream, u64) {
    try_connect_via(proxy, target)
        .await
        .unwrap_or_else(|head| panic!("the proxy did not answer 200: {head}"))
}

/// [`connect_via`], or the reply head when it is not a 200.
async fn try_connect_via(proxy: SocketAddr, target: &str) -> Result<(TcpStream, u64), String> {
    let mut stream = TcpStream::connect(proxy).await.expect("connect proxy");
    let _ = stream.set_nodelay(true);
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .expect("CONNECT");
    let mut head = Vec::with_capacity(128);
    let mut buf = [0u8; 256];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.expect("proxy reply");
        assert!(
            n > 0,
            "the proxy closed: {}",
            String::from_utf8_lossy(&head)
        );
        head.extend_from_slice(&buf[..n]);
    }
    if !(head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200")) {
        return Err(String::from_utf8_lossy(&head).into_owned());
    }
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(head.len(), |i| i + 4);
    if TLS.get().is_some() {
        stream.write_all(hello()).await.expect("ClientHello");
    }
    Ok((stream, (head.len() - end) as u64))
}

/// Set in the TLS modes: the source is on 443 and clients send a ClientHello.
pub(crate) static TLS: std::sync::OnceLock<()> = std::sync::OnceLock::new();

/// A real ClientHello for bulk.example.test, made once by rustls.
fn hello() -> &'static [u8] {
    static HELLO: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    HELLO.get_or_init(|| {
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("bulk.example.test").expect("name");
        let mut client =
            rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("client");
        let mut bytes = Vec::new();
        client.write_tls(&mut bytes).expect("ClientHello");
        bytes
    })
}

/// The source's port: 443 in the TLS modes.
fn source_port() -> u16 {
    if TLS.get().is_some() { 443 } else { 0 }
}

/// A direct connection to the source, with the ClientHello in the TLS modes.
async fn direct(source: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(source).await.expect("connect source");
    if TLS.get().is_some() {
        stream.write_all(hello()).await.expect("ClientHello");
    }
    stream
}

/// A tunnel to the source through `proxy`: CONNECT and the 200, or for a relay a plain
/// connection (with the ClientHello in the TLS modes); and the tunnel bytes already read.
async fn tunnel_via(proxy: &Proxy, source: SocketAddr) -> (TcpStream, u64) {
    match proxy.target(source.port()) {
        Some(target) => connect_via(proxy.addr, &target).await,
        None => (direct(proxy.addr).await, 0),
    }
}

async fn throughput(binary: &str, extra: &[String], dir: &Path) {
    let bytes = THROUGHPUT_MIB * 1024 * 1024;
    let dns = FakeDns::start().await;
    dns.answer_with_ttl("bulk.example.test", &[SOURCE_IP], 300);
    let source = source(bytes, source_port()).await;
    let all = proxies(binary, extra, dns.addr(), source.port(), source, dir);
    // Per path (the first is direct): the rates and the CPU seconds spent over all rounds.
    let mut paths = vec![(Vec::new(), Cpu::default()); all.len() + 1];
    for _ in 0..THROUGHPUT_ROUNDS {
        for (i, (rates, spent)) in paths.iter_mut().enumerate() {
            let proxy = i.checked_sub(1).map(|p| &all[p]);
            let before = Cpu::now(proxy);
            let start = Instant::now();
            let rate = match proxy {
                None => drain(direct(source).await, start, bytes, 0, "direct").await,
                Some(proxy) => {
                    let (stream, already) = tunnel_via(proxy, source).await;
                    drain(stream, start, bytes, already, &proxy.label).await
                }
            };
            rates.push(rate);
            spent.add_since(&before, proxy);
        }
    }
    // One more transfer each, with perf counting the proxy's system calls and switches.
    let mut traces = Vec::new();
    for proxy in &all {
        let trace = Trace::attach(proxy.child.id());
        let (stream, already) = tunnel_via(proxy, source).await;
        drain(stream, Instant::now(), bytes, already, &proxy.label).await;
        traces.push(trace.and_then(Trace::finish));
    }
    let gib = (bytes * THROUGHPUT_ROUNDS as u64) as f64 / (1024.0 * 1024.0 * 1024.0);
    let per_gib = |n: u64| format!("{:.0}", n as f64 * 1024.0 / THROUGHPUT_MIB as f64);
    let mut paths = paths.into_iter();
    let (base, base_cpu) = paths.next().expect("the direct path");
    let b = median(base);
    println!(
        "| path | MiB/s | ratio to direct | proxy CPU s per GiB | endpoints CPU s per GiB | machine CPU s per GiB | proxy system calls per GiB | proxy context switches per GiB |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| direct loopback TCP (baseline) | {b:.0} | 1.00 | - | {:.2} | {:.2} | - | - |",
        base_cpu.endpoints / gib,
        base_cpu.machine / gib
    );
    let mut summary = Vec::new();
    for ((proxy, (rates, cpu)), trace) in all.iter().zip(paths).zip(traces) {
        let o = median(rates);
        summary.push((o, cpu.proxy / gib, cpu.machine / gib));
        let (calls, switches) = Trace::cells(trace, per_gib);
        println!(
            "| through {} | {o:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {calls} | {switches} |",
            proxy.label,
            o / b,
            cpu.proxy / gib,
            cpu.endpoints / gib,
            cpu.machine / gib
        );
    }
    if let Some(h) = all.iter().position(|p| p.target_host.is_none()) {
        println!(
            "\n`agentguard egress-proxy` against HAProxy in this run: {:.2}x the throughput, at {:.2}x its CPU per GiB ({:.2}x the machine's).",
            summary[0].0 / summary[h].0,
            summary[0].1 / summary[h].1,
            summary[0].2 / summary[h].2
        );
    }
    println!(
        "\n{THROUGHPUT_MIB} MiB per transfer, {THROUGHPUT_ROUNDS} rounds; endpoints are the client and source (this process); machine CPU is every core's busy time during the transfers (from /proc/stat: the proxy, the endpoints, and kernel work charged to neither), {} cores; system calls and switches from `perf stat` over one more transfer each.",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}

/// CPU seconds: the proxy's (none on the direct path), the endpoints' (this process: the
/// client and the source), and the whole machine's busy time.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    proxy: f64,
    endpoints: f64,
    machine: f64,
}

impl Cpu {
    /// The clocks now.
    fn now(proxy: Option<&Proxy>) -> Cpu {
        Cpu {
            proxy: proxy.map_or(0.0, Proxy::cpu_seconds),
            endpoints: peers::cpu_seconds_of("self"),
            machine: machine_cpu_seconds(),
        }
    }

    /// Adds what each clock moved since `before`.
    fn add_since(&mut self, before: &Cpu, proxy: Option<&Proxy>) {
        let now = Cpu::now(proxy);
        self.proxy += now.proxy - before.proxy;
        self.endpoints += now.endpoints - before.endpoints;
        self.machine += now.machine - before.machine;
    }
}

/// The proxy's resident memory in KiB and its open file descriptors.
fn footprint(proxy: &Proxy) -> (u64, usize) {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", proxy.child.id())).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{}/fd", proxy.child.id()))
        .map(|d| d.count())
        .unwrap_or(0);
    (rss, fds)
}

/// Idle tunnels asked for, with the proxy's default limits (which derive the cap from the
/// descriptor limit: 3,322 for the 20,000 here).
const IDLE_TUNNELS: usize = 10_000;

async fn idle(binary: &str) {
    let dns = FakeDns::start().await;
    let echo = agentguard_test_support::EchoServer::try_start(SOURCE_IP, 0)
        .await
        .expect("echo server");
    dns.answer_with_ttl("bulk.example.test", &[SOURCE_IP], 300);
    let proxy = start_agentguard_with(
        "`agentguard egress-proxy`",
        binary,
        dns.addr(),
        echo.addr().port(),
        None,
        &[],
    );
    let target = proxy
        .target(echo.addr().port())
        .expect("agentguard reads CONNECT");
    drop(connect_via(proxy.addr, &target).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss0, fds0) = footprint(&proxy);
    let mut tunnels = Vec::with_capacity(IDLE_TUNNELS);
    let (mut refused, mut refusal_time) = (0usize, Duration::ZERO);
    for _ in 0..IDLE_TUNNELS {
        let asked = Instant::now();
        match try_connect_via(proxy.addr, &target).await {
            Ok((stream, _)) => tunnels.push(stream),
            Err(head) => {
                assert!(head.contains("too_many_connections"), "{head}");
                refused += 1;
                refusal_time += asked.elapsed();
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss1, fds1) = footprint(&proxy);
    let held = tunnels.len();
    drop(tunnels);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut fds2 = footprint(&proxy).1;
    while fds2 > fds0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        fds2 = footprint(&proxy).1;
    }
    let n = held as f64;
    println!("| measure | before | with {held} idle tunnels | per tunnel | after closing all |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    println!(
        "| proxy resident memory | {:.1} MiB | {:.1} MiB | {:.1} KiB | - |",
        rss0 as f64 / 1024.0,
        rss1 as f64 / 1024.0,
        (rss1.saturating_sub(rss0)) as f64 / n
    );
    println!(
        "| proxy open file descriptors | {fds0} | {fds1} | {:.2} | {fds2} |",
        (fds1 - fds0) as f64 / n
    );
    let mean_refusal = refusal_time.as_secs_f64() * 1e6 / refused.max(1) as f64;
    println!(
        "
{IDLE_TUNNELS} tunnels asked for with the default limits: {held} held (the cap the descriptor limit affords), {refused} answered 503 `too_many_connections` at once (mean {mean_refusal:.0} us from connect to the answer). All {held} tunnels {} after their clients closed.",
        if fds2 <= fds0 {
            "were closed by the proxy"
        } else {
            "were NOT all closed"
        }
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args
        .next()
        .expect("usage: proxy_bench throughput|setup AGENTGUARD_BINARY [LABEL=BINARY...]");
    let binary = args.next().expect("AGENTGUARD_BINARY");
    let extra: Vec<String> = args.collect();
    let dir = std::env::temp_dir().join(format!("agentguard-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    if mode.ends_with("-tls") {
        let _ = TLS.set(());
    }
    match mode.as_str() {
        "throughput" | "throughput-tls" => throughput(&binary, &extra, &dir).await,
        "setup" | "setup-tls" => setup::setup(&binary, &extra, &dir).await,
        "idle" => idle(&binary).await,
        "reload" => reload::reload(&binary, &dir).await,
        "serve" => setup::serve().await,
        other => panic!("unknown mode {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

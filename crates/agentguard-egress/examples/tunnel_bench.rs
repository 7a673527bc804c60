//! Tunnel throughput: bytes from a loopback TCP source read directly, and through a CONNECT
//! tunnel of the real `agentguard egress-proxy` binary (and of any other proxy given).
//!
//! The source on 127.0.0.2 writes the same number of bytes to every connection; a name for it
//! is served by the test DNS server. Rounds alternate direct and proxied reads; the medians
//! and ratios are printed as a Markdown table for docs/PERFORMANCE.md. Run it through
//! `cargo xtask bench tunnel`.
//!
//! The proxy's own CPU time (user + system, from /proc) per GiB moved is reported too: on a
//! machine where client, source and proxy share the cores, it shows what the proxy costs even
//! when throughput is bounded by the loopback TCP work of the extra hop.
//!
//! Usage: tunnel_bench AGENTGUARD_BINARY [MIB] [ROUNDS] [LABEL=OTHER_AGENTGUARD_BINARY...]

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use agentguard_test_support::FakeDns;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SOURCE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const CHUNK: usize = 256 * 1024;

async fn source(bytes: u64) -> SocketAddr {
    let listener = TcpListener::bind((SOURCE_IP, 0))
        .await
        .expect("bind source");
    let addr = listener.local_addr().expect("source address");
    tokio::spawn(async move {
        let data = vec![0x5au8; CHUNK];
        while let Ok((mut stream, _)) = listener.accept().await {
            let data = data.clone();
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

/// Reads everything from `stream`; returns MiB/s.
async fn drain(mut stream: TcpStream, start: Instant, expect: u64) -> f64 {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = stream.read(&mut buf).await.expect("read");
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    assert_eq!(total, expect, "short read");
    total as f64 / (1024.0 * 1024.0) / start.elapsed().as_secs_f64()
}

async fn direct(addr: SocketAddr, bytes: u64) -> f64 {
    let start = Instant::now();
    drain(
        TcpStream::connect(addr).await.expect("connect source"),
        start,
        bytes,
    )
    .await
}

async fn proxied(proxy: SocketAddr, target: &str, bytes: u64) -> f64 {
    let start = Instant::now();
    let mut stream = TcpStream::connect(proxy).await.expect("connect proxy");
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .expect("CONNECT");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.expect("proxy reply");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    drain(stream, start, bytes).await
}

struct Proxy(Child);

impl Proxy {
    /// CPU seconds (user + system) the proxy process has used so far.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).unwrap_or_default();
        let after = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or_default();
        let fields: Vec<u64> = after
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        // utime and stime are fields 14 and 15 of the whole line (11 and 12 after the name).
        let ticks = fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0);
        ticks as f64 / 100.0
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_agentguard(binary: &str, dns: SocketAddr, port: u16) -> (Proxy, SocketAddr) {
    let mut child = Command::new(binary)
        .args([
            "egress-proxy",
            "--port",
            "0",
            "--allow",
            "bulk.example.test",
            "--allow-port",
            &port.to_string(),
        ])
        .args([
            "--allow-cidr",
            "127.0.0.2/32",
            "--nameserver",
            &dns.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start agentguard egress-proxy");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("readiness line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("listening on IP:PORT")
        .parse()
        .expect("address");
    (Proxy(child), addr)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let binary = args
        .next()
        .expect("usage: tunnel_bench AGENTGUARD_BINARY [MIB] [ROUNDS]");
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let bytes = mib * 1024 * 1024;

    let dns = FakeDns::start().await;
    dns.answer("bulk.example.test", &[SOURCE_IP]);
    let source = source(bytes).await;
    let target = format!("bulk.example.test:{}", source.port());
    let mut proxies = vec![("`agentguard egress-proxy`".to_owned(), binary)];
    for extra in args {
        let (label, path) = extra.split_once('=').expect("LABEL=BINARY");
        proxies.push((label.to_owned(), path.to_owned()));
    }
    let started: Vec<(String, Proxy, SocketAddr)> = proxies
        .into_iter()
        .map(|(label, path)| {
            let (proxy, addr) = start_agentguard(&path, dns.addr(), source.port());
            (label, proxy, addr)
        })
        .collect();

    let mut base = Vec::new();
    let mut ours: Vec<(Vec<f64>, f64)> = vec![(Vec::new(), 0.0); started.len()];
    for _ in 0..rounds {
        base.push(direct(source, bytes).await);
        for (i, (_, proxy, addr)) in started.iter().enumerate() {
            let cpu = proxy.cpu_seconds();
            ours[i].0.push(proxied(*addr, &target, bytes).await);
            ours[i].1 += proxy.cpu_seconds() - cpu;
        }
    }
    let b = median(base);
    let gib = (bytes * rounds as u64) as f64 / (1024.0 * 1024.0 * 1024.0);
    println!("| path | MiB/s | ratio to direct | proxy CPU s per GiB |");
    println!("| --- | ---: | ---: | ---: |");
    println!("| direct loopback TCP (baseline) | {b:.0} | 1.00 | - |");
    for ((label, _, _), (rates, cpu)) in started.iter().zip(ours) {
        let o = median(rates);
        println!(
            "| through {label} | {o:.0} | {:.2} | {:.2} |",
            o / b,
            cpu / gib
        );
    }
    println!();
    println!("{mib} MiB per transfer.");
}

//! Tunnel throughput: bytes from a loopback TCP source read directly, and through a CONNECT
//! tunnel of the real `agentguard egress-proxy` binary (and of any other proxy given).
//!
//! The source on 127.0.0.2 writes the same number of bytes to every connection; a name for it
//! is served by the test DNS server. Rounds alternate direct and proxied reads; the medians
//! and ratios are printed as a Markdown table for docs/PERFORMANCE.md. Run it through
//! `cargo xtask bench tunnel`.
//!
//! Usage: tunnel_bench AGENTGUARD_BINARY [MIB] [ROUNDS]

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
    let (_proxy, proxy_addr) = start_agentguard(&binary, dns.addr(), source.port());
    let target = format!("bulk.example.test:{}", source.port());

    let (mut base, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        base.push(direct(source, bytes).await);
        ours.push(proxied(proxy_addr, &target, bytes).await);
    }
    let (b, o) = (median(base), median(ours));
    println!("| path | MiB/s | ratio to direct |");
    println!("| --- | ---: | ---: |");
    println!("| direct loopback TCP (baseline) | {b:.0} | 1.00 |");
    println!(
        "| through `agentguard egress-proxy` | {o:.0} | {:.2} |",
        o / b
    );
    println!();
    println!("{mib} MiB per transfer.");
}

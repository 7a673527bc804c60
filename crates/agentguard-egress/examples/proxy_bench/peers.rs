//! The proxies under comparison, each its own process: the release `agentguard
//! egress-proxy`, tinyproxy and squid, started on a free port and killed on drop.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::SOURCE_IP;

/// A proxy process, killed on drop.
pub(crate) struct Proxy {
    pub(crate) label: String,
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    /// What to CONNECT to: a name for agentguard, the IP for the others.
    pub(crate) target_host: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    /// CPU seconds (user + system) the proxy process has used so far.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let after = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or_default();
        let fields: Vec<u64> = after
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        // utime and stime: fields 14 and 15 of the line, 11 and 12 after the command name.
        (fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0)) as f64 / 100.0
    }

    pub(crate) fn target(&self, port: u16) -> String {
        format!("{}:{port}", self.target_host)
    }
}

pub(crate) use agentguard_test_support::free_port;

pub(crate) fn wait_listening(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not start listening on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--max-connections 20000` (the descriptors allow fewer under the derived default), or with
/// `None`, the proxy's own default.
pub(crate) fn start_agentguard(label: &str, binary: &str, dns: SocketAddr, port: u16) -> Proxy {
    start_agentguard_with(label, binary, dns, port, Some("20000"))
}

pub(crate) fn start_agentguard_with(
    label: &str,
    binary: &str,
    dns: SocketAddr,
    port: u16,
    max_connections: Option<&str>,
) -> Proxy {
    let cap: Vec<&str> = max_connections
        .map(|n| vec!["--max-connections", n])
        .unwrap_or_default();
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
        .args(cap)
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
    Proxy {
        label: label.to_owned(),
        child,
        addr,
        target_host: "bulk.example.test".into(),
    }
}

pub(crate) fn start_tinyproxy(dir: &Path, port: u16) -> Option<Proxy> {
    let listen = free_port();
    let conf = dir.join("tinyproxy.conf");
    std::fs::write(
        &conf,
        format!(
            "Port {listen}\nListen 127.0.0.1\nTimeout 600\nMaxClients 1000\nAllow 127.0.0.1\nConnectPort {port}\nLogLevel Critical\nPidFile \"{}\"\n",
            dir.join("tinyproxy.pid").display()
        ),
    )
    .ok()?;
    let child = Command::new("tinyproxy")
        .args(["-d", "-c"])
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen);
    wait_listening(addr, "tinyproxy");
    Some(Proxy {
        label: "tinyproxy".into(),
        child,
        addr,
        target_host: SOURCE_IP.to_string(),
    })
}

pub(crate) fn start_squid(dir: &Path, port: u16) -> Option<Proxy> {
    let listen = free_port();
    let conf = dir.join("squid.conf");
    std::fs::write(
        &conf,
        format!(
            "http_port 127.0.0.1:{listen}\nacl SSL_ports port {port}\nacl CONNECT method CONNECT\nhttp_access deny CONNECT !SSL_ports\nhttp_access allow localhost\nhttp_access deny all\ncache deny all\ncache_mem 8 MB\naccess_log none\ncache_log {dir}/cache.log\npid_filename {dir}/squid.pid\ncoredump_dir {dir}\nshutdown_lifetime 0 seconds\npinger_enable off\nicp_port 0\nhtcp_port 0\ndns_nameservers 127.0.0.1\nmax_filedescriptors 16384\n",
            dir = dir.display()
        ),
    )
    .ok()?;
    let child = Command::new("squid")
        .args(["-N", "-f"])
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen);
    wait_listening(addr, "squid");
    Some(Proxy {
        label: "squid".into(),
        child,
        addr,
        target_host: SOURCE_IP.to_string(),
    })
}

pub(crate) fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Every proxy: agentguard, extra agentguard binaries, tinyproxy and squid (when installed).
pub(crate) fn proxies(
    binary: &str,
    extra: &[String],
    dns: SocketAddr,
    port: u16,
    dir: &Path,
) -> Vec<Proxy> {
    let mut all = vec![start_agentguard(
        "`agentguard egress-proxy`",
        binary,
        dns,
        port,
    )];
    for e in extra {
        let (label, path) = e.split_once('=').expect("LABEL=BINARY");
        all.push(start_agentguard(label, path, dns, port));
    }
    match start_tinyproxy(dir, port) {
        Some(p) => all.push(p),
        None => eprintln!("tinyproxy is not installed: skipped (cargo xtask bench installs it)"),
    }
    match start_squid(dir, port) {
        Some(p) => all.push(p),
        None => eprintln!("squid is not installed: skipped (cargo xtask bench installs it)"),
    }
    all
}

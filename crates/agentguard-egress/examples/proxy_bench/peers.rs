//! The proxies under comparison, each its own process: the release `agentguard
//! egress-proxy`, tinyproxy, squid and HAProxy, started on a free port and killed on drop.
//!
//! HAProxy runs in `mode tcp` with splicing on (see [`start_haproxy`]): a relay that decides nothing and
//! speaks no CONNECT. Its one backend is given per benchmark: the source in the throughput
//! modes (the client reads from HAProxy as from the source), and a responder that answers
//! each request head with a 200 in the setup modes, so the client's round trip (connect, send
//! CONNECT, read the 200, close) is the same through every peer and HAProxy dials the
//! upstream for each connection as a CONNECT proxy does.

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
    /// What to CONNECT to: a name for agentguard, the IP for the others; `None` for a relay
    /// (HAProxy) that forwards to its backend and reads no CONNECT.
    pub(crate) target_host: Option<String>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU seconds (user + system, all threads) process `pid` has used so far.
pub(crate) fn cpu_seconds_of(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or_default();
    let fields: Vec<u64> = after
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // utime and stime: fields 14 and 15 of the line, 11 and 12 after the command name.
    (fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0)) as f64 / 100.0
}

/// Busy CPU seconds of the whole machine so far (every core; from /proc/stat, everything but
/// idle and iowait): what a path costs including the kernel work done outside the proxy's own
/// process (softirqs charged to whichever task they interrupt, kernel threads).
pub(crate) fn machine_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
    let all: u64 = ticks.iter().take(8).sum();
    let waiting = ticks.get(3).unwrap_or(&0) + ticks.get(4).unwrap_or(&0);
    (all - waiting) as f64 / 100.0
}

/// System calls and context switches of a process over a span, counted by `perf stat`
/// attached to all its threads (counting, not sampling).
pub(crate) struct Trace(Child);

impl Trace {
    /// Attaches to `pid`; `None` when perf is missing or cannot count (the columns then say
    /// so). perf needs a moment to attach before the span starts.
    pub(crate) fn attach(pid: u32) -> Option<Trace> {
        let child = Command::new("perf")
            .args([
                "stat",
                "-x",
                ",",
                "-e",
                "raw_syscalls:sys_enter,context-switches",
                "-p",
            ])
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        std::thread::sleep(Duration::from_millis(300));
        Some(Trace(child))
    }

    /// Stops counting: (system calls, context switches).
    pub(crate) fn finish(self) -> Option<(u64, u64)> {
        let Trace(child) = self;
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let out = child.wait_with_output().ok()?;
        let text = String::from_utf8_lossy(&out.stderr);
        let count = |event: &str| {
            text.lines()
                .find(|l| l.split(',').nth(2) == Some(event))
                .and_then(|l| l.split(',').next()?.parse::<u64>().ok())
        };
        Some((count("raw_syscalls:sys_enter")?, count("context-switches")?))
    }
}

impl Trace {
    /// The table cells of a finished trace's (system calls, switches), each scaled by `per`,
    /// or "not counted".
    pub(crate) fn cells(
        counts: Option<(u64, u64)>,
        per: impl Fn(u64) -> String,
    ) -> (String, String) {
        counts.map_or(
            ("not counted".into(), "not counted".into()),
            |(calls, switches)| (per(calls), per(switches)),
        )
    }
}

impl Proxy {
    /// CPU seconds (user + system) the proxy process has used so far.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(&self.child.id().to_string())
    }

    /// The CONNECT target, or `None` for a relay.
    pub(crate) fn target(&self, port: u16) -> Option<String> {
        self.target_host
            .as_ref()
            .map(|host| format!("{host}:{port}"))
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
    start_agentguard_with(label, binary, dns, port, Some("20000"), &[])
}

/// The proxy with `--max-connections` (see [`start_agentguard`]) and `more` arguments.
pub(crate) fn start_agentguard_with(
    label: &str,
    binary: &str,
    dns: SocketAddr,
    port: u16,
    max_connections: Option<&str>,
    more: &[&std::ffi::OsStr],
) -> Proxy {
    let cap: Vec<&str> = max_connections
        .map(|n| vec!["--max-connections", n])
        .unwrap_or_default();
    let child = Command::new(binary)
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
        .args(more)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start agentguard egress-proxy");
    ready(label, child)
}

/// The agentguard proxy `child` once its readiness line says where it listens.
pub(crate) fn ready(label: &str, mut child: Child) -> Proxy {
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
        target_host: Some("bulk.example.test".into()),
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
    let ip = Some(SOURCE_IP.to_string());
    start_peer("tinyproxy", "tinyproxy", &["-d", "-c"], &conf, listen, ip)
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
    let ip = Some(SOURCE_IP.to_string());
    start_peer("squid", "squid", &["-N", "-f"], &conf, listen, ip)
}

/// HAProxy 2.6 from Debian in `mode tcp`, forwarding every connection to `backend`, with its
/// default threads (one per core), at its fastest here: `option splice-auto` alone splices
/// nothing on these transfers (HAProxy's heuristic keeps them in its 16 KiB buffers: 1,271
/// MiB/s and 133,168 system calls per GiB in one run), so splicing is forced both ways
/// (`splice-request`, `splice-response`) with 1 MiB pipes (`tune.pipesize`), the same size
/// agentguard asks for: 2,368 MiB/s and 5,059 system calls per GiB in the same kind of run.
pub(crate) fn start_haproxy(dir: &Path, backend: SocketAddr) -> Option<Proxy> {
    let listen = free_port();
    let conf = dir.join("haproxy.cfg");
    std::fs::write(
        &conf,
        format!(
            "global\n  maxconn 4000\n  tune.pipesize 1048576\n\ndefaults\n  mode tcp\n  option splice-auto\n  option splice-request\n  option splice-response\n  timeout connect 5s\n  timeout client 600s\n  timeout server 600s\n\nfrontend bench\n  bind 127.0.0.1:{listen}\n  default_backend source\n\nbackend source\n  server source {backend}\n"
        ),
    )
    .ok()?;
    let label = "HAProxy (`mode tcp`, splice forced, 1 MiB pipes)";
    start_peer(label, "haproxy", &["-db", "-f"], &conf, listen, None)
}

/// Starts `program ARGS... CONF` in the foreground, quiet, and waits until it listens on
/// `127.0.0.1:listen`; `None` when the program is not installed.
fn start_peer(
    label: &str,
    program: &str,
    args: &[&str],
    conf: &Path,
    listen: u16,
    target_host: Option<String>,
) -> Option<Proxy> {
    let child = Command::new(program)
        .args(args)
        .arg(conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen);
    wait_listening(addr, program);
    Some(Proxy {
        label: label.into(),
        child,
        addr,
        target_host,
    })
}

pub(crate) fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// Every proxy: agentguard, extra agentguard binaries, tinyproxy, squid and HAProxy (when
/// installed; `cargo xtask bench` installs them), HAProxy relaying to `relay_backend`.
pub(crate) fn proxies(
    binary: &str,
    extra: &[String],
    dns: SocketAddr,
    port: u16,
    relay_backend: SocketAddr,
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
    match start_haproxy(dir, relay_backend) {
        Some(p) => all.push(p),
        None => eprintln!("haproxy is not installed: skipped (cargo xtask bench installs it)"),
    }
    all
}

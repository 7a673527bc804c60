//! `agentguard egress-proxy --policy FILE` as a real process: reloads on SIGHUP and on
//! `--watch`, generations in every decision, revocation of open tunnels, a file that does not
//! load, and `--metrics` (`/metrics` against the audit log, `/healthz` while it drains).

use std::io::{BufRead, BufReader, Read as _, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use agentguard_test_support::{EchoServer, FakeDns};
use serde_json::Value;

/// Two upstreams, `a.example.test` on 127.0.0.2 and `b.example.test` on 127.0.0.3, named by a
/// fake DNS server, and a folder for the policy file and the audit log.
struct World {
    dns: FakeDns,
    a: EchoServer,
    b: EchoServer,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
        let dns = FakeDns::start().await;
        let a = EchoServer::try_start(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0)
            .await
            .unwrap();
        let b = EchoServer::try_start(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)), 0)
            .await
            .unwrap();
        // With a TTL: a reload that keeps the nameservers keeps the resolver's cache.
        dns.answer_with_ttl("a.example.test", &[a.addr().ip()], 300);
        dns.answer_with_ttl("b.example.test", &[b.addr().ip()], 300);
        World {
            dns,
            a,
            b,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn policy(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("egress.jsonl")
    }

    /// Writes the policy file allowing `hosts` (of `a`, `b`), replacing it at once (a rename).
    fn write(&self, hosts: &[&str]) {
        let hosts: Vec<String> = hosts
            .iter()
            .map(|h| format!("\"{h}.example.test\""))
            .collect();
        let text = format!(
            "allow = [{}]\nallow_ports = [{}, {}]\nallow_cidrs = [\"127.0.0.2/32\", \"127.0.0.3/32\"]\nnameservers = [\"{}\"]\n",
            hosts.join(", "),
            self.a.addr().port(),
            self.b.addr().port(),
            self.dns.addr()
        );
        self.write_text(&text);
    }

    fn write_text(&self, text: &str) {
        let next = self.dir.path().join("policy.toml.new");
        std::fs::write(&next, text).unwrap();
        std::fs::rename(&next, self.policy()).unwrap();
    }

    fn port(&self, host: &str) -> u16 {
        match host {
            "a" => self.a.addr().port(),
            _ => self.b.addr().port(),
        }
    }
}

/// The proxy on `--policy` with an audit log, `-v` and `extra`; its stdout after the readiness
/// line, its address, and its diagnostics line by line (each read as it is written).
fn start(
    world: &World,
    extra: &[&str],
) -> (Child, BufReader<ChildStdout>, String, Receiver<String>) {
    let policy = world.policy().to_string_lossy().into_owned();
    let log = world.log().to_string_lossy().into_owned();
    let base = [
        "-v",
        "egress-proxy",
        "--port",
        "0",
        "--policy",
        &policy,
        "--audit",
        &log,
    ];
    let args: Vec<String> = base.iter().chain(extra).map(|s| (*s).to_owned()).collect();
    let (mut child, stdout, addr) = crate::egress::spawn(&args);
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                return;
            }
        }
    });
    (child, stdout, addr, lines)
}

/// Waits (10 s at most) for the diagnostic line saying `needle`: the proxy writes it once
/// what it tells of is done (an event recorded, a reload in place, health turned).
fn wait_line(lines: &Receiver<String>, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no line saying {needle:?} ({e})"));
        if line.contains(needle) {
            return;
        }
    }
}

/// A CONNECT to `host` (`a`, `b`) through the proxy: the status line's code, and the stream.
fn connect(world: &World, proxy: &str, host: &str) -> (u16, TcpStream) {
    let mut stream = TcpStream::connect(proxy).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let port = world.port(host);
    write!(
        stream,
        "CONNECT {host}.example.test:{port} HTTP/1.1\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, stream)
}

/// Sends `bytes` through an open tunnel to an echo upstream and reads them all back.
fn echo(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).unwrap();
    let mut back = vec![0u8; bytes.len()];
    stream.read_exact(&mut back).unwrap();
    assert!(back == bytes, "the tunnel carried every byte, in order");
}

/// The audit log's events so far.
fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The log's first event `wanted` accepts.
fn logged(log: &Path, wanted: impl Fn(&Value) -> bool) -> Value {
    let all = events(log);
    let found = all.iter().find(|e| wanted(e)).cloned();
    found.unwrap_or_else(|| panic!("no such event: {all:?}"))
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn is(event: &Value, kind: &str, reason: &str) -> bool {
    event["kind"] == kind && event["reason"] == reason
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_the_file_and_closes_exactly_the_tunnels_it_no_longer_allows() {
    let world = World::new().await;
    world.write(&["a", "b"]);
    tokio::task::spawn_blocking(move || {
        let (mut child, _stdout, proxy, lines) = start(&world, &[]);
        let (code, mut kept) = connect(&world, &proxy, "a");
        assert_eq!(code, 200);
        let (code, mut cut) = connect(&world, &proxy, "b");
        assert_eq!(code, 200);
        echo(&mut cut, b"before the reload");
        world.write(&["a"]);
        signal(&child, "-HUP");
        // The revoked tunnel is closed by the proxy: EOF, well within the 10 s read timeout.
        let asked = Instant::now();
        let mut rest = Vec::new();
        cut.read_to_end(&mut rest).unwrap();
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{:?}",
            asked.elapsed()
        );
        wait_line(&lines, "policy file loaded");
        let loaded = logged(&world.log(), |e| is(e, "policy_loaded", "signal"));
        assert_eq!(loaded["data"]["generation"], 2);
        assert_eq!(loaded["data"]["removed"][0], "allow \"b.example.test\"");
        assert_eq!(loaded["data"]["added"], serde_json::json!([]));
        // The other tunnel carries a megabyte both ways, byte for byte.
        let big: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        echo(&mut kept, &big);
        assert_eq!(connect(&world, &proxy, "b").0, 403);
        // A file that does not load keeps generation 2.
        world.write_text("allow = [\"a.example.test\"\n");
        signal(&child, "-HUP");
        wait_line(&lines, "policy file not loaded");
        let failed = logged(&world.log(), |e| is(e, "policy_loaded", "load_failed"));
        assert_eq!(failed["decision"], "error");
        assert_eq!(failed["data"]["generation"], 2);
        assert_eq!(connect(&world, &proxy, "a").0, 200);
        drop(kept);
        signal(&child, "-TERM");
        assert_eq!(child.wait().unwrap().code(), Some(0));
        let log = events(&world.log());
        let close = |target: &str| {
            log.iter()
                .find(|e| e["kind"] == "egress_close" && e["subject"]["target"] == target)
                .map(|e| e["reason"].clone())
        };
        let (a, b) = (world.port("a"), world.port("b"));
        assert_eq!(
            close(&format!("b.example.test:{b}")).unwrap(),
            "policy_revoked"
        );
        assert_ne!(
            close(&format!("a.example.test:{a}")).unwrap(),
            "policy_revoked"
        );
        let generations: Vec<(String, u64)> = log
            .iter()
            .filter(|e| e["kind"] == "egress_connect" || e["kind"] == "policy_loaded")
            .map(|e| {
                let label = format!("{} {}", e["kind"], e["decision"]).replace('"', "");
                (label, e["data"]["generation"].as_u64().unwrap())
            })
            .collect();
        let expected = [
            ("policy_loaded allow", 1),
            ("egress_connect allow", 1),
            ("egress_connect allow", 1),
            ("policy_loaded allow", 2),
            ("egress_connect deny", 2),
            ("policy_loaded error", 2),
            ("egress_connect allow", 2),
        ];
        let expected: Vec<(String, u64)> =
            expected.iter().map(|(l, g)| (l.to_string(), *g)).collect();
        assert_eq!(generations, expected);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_reloads_a_changed_file_and_the_floor_keeps_a_widening_one_out() {
    let world = World::new().await;
    world.write(&["a"]);
    let floor = world.dir.path().join("floor.toml");
    std::fs::write(
        &floor,
        format!(
            "allow = [\"a.example.test\", \"b.example.test\"]\nallow_ports = [{}, {}]\nallow_cidrs = [\"127.0.0.0/8\"]\n",
            world.port("a"),
            world.port("b")
        ),
    )
    .unwrap();
    tokio::task::spawn_blocking(move || {
        let floor = floor.to_str().unwrap().to_owned();
        let (mut child, _stdout, proxy, lines) = start(&world, &["--watch", "--floor", &floor]);
        assert_eq!(connect(&world, &proxy, "b").0, 403);
        assert_eq!(connect(&world, &proxy, "a").0, 200);
        let asked = world.dns.queries("a.example.test").len();
        // A wildcard is beyond the floor: refused, generation 1 kept, b still refused.
        let text = std::fs::read_to_string(world.policy()).unwrap();
        world.write_text(&text.replace("allow = [", "allow = [\"*.example.test\", "));
        wait_line(&lines, "policy file not loaded");
        let refused = logged(&world.log(), |e| is(e, "policy_loaded", "beyond_floor"));
        assert_eq!(refused["data"]["generation"], 1);
        let message = refused["data"]["message"].as_str().unwrap();
        assert!(message.contains("*.example.test"), "{message}");
        assert_eq!(connect(&world, &proxy, "b").0, 403);
        // Within the floor: loaded by the watch (no signal sent), and b is reachable.
        world.write(&["a", "b"]);
        wait_line(&lines, "policy file loaded");
        let loaded = logged(&world.log(), |e| is(e, "policy_loaded", "watch"));
        assert_eq!(loaded["data"]["generation"], 2);
        assert_eq!(
            loaded["data"]["sha256"],
            agentguard_audit::sha256_hex(&std::fs::read(world.policy()).unwrap())
        );
        assert_eq!(connect(&world, &proxy, "b").0, 200);
        // The same nameservers: the resolver and its cached answer for `a` were kept.
        assert_eq!(connect(&world, &proxy, "a").0, 200);
        assert_eq!(world.dns.queries("a.example.test").len(), asked);
        signal(&child, "-TERM");
        assert_eq!(child.wait().unwrap().code(), Some(0));
    })
    .await
    .unwrap();
}

/// One GET on the metrics port: the status code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: metrics\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
    (code, body.unwrap_or_default())
}

/// A free port on 127.0.0.1 for the metrics server.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The value of the sample `name` (with its labels, as written) in `text`.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_what_the_audit_log_holds_and_health_turns_503_while_draining() {
    let world = World::new().await;
    world.write(&["a"]);
    tokio::task::spawn_blocking(move || {
        let metrics = format!("127.0.0.1:{}", free_port());
        let (mut child, _stdout, proxy, lines) =
            start(&world, &["--metrics", &metrics, "--grace", "30"]);
        assert_eq!(get(&metrics, "/healthz").0, 200);
        let (_, mut first) = connect(&world, &proxy, "a");
        echo(&mut first, b"0123456789");
        drop(first);
        assert_eq!(connect(&world, &proxy, "b").0, 403);
        let (_, mut open) = connect(&world, &proxy, "a");
        echo(&mut open, b"still open");
        wait_line(&lines, "egress tunnel closed");
        let (code, text) = get(&metrics, "/metrics");
        assert_eq!(code, 200);
        let log = events(&world.log());
        let count = |decision: &str, reason: &str| {
            log.iter()
                .filter(|e| e["kind"] == "egress_connect")
                .filter(|e| e["decision"] == decision && e["reason"] == reason)
                .count() as f64
        };
        let allowed = "agentguard_egress_decisions_total{decision=\"allow\",reason=\"ok\"}";
        assert_eq!(sample(&text, allowed), count("allow", "ok"));
        let denied =
            "agentguard_egress_decisions_total{decision=\"deny\",reason=\"domain_not_allowed\"}";
        assert_eq!(sample(&text, denied), count("deny", "domain_not_allowed"));
        assert_eq!(sample(&text, "agentguard_egress_tunnels_open"), 1.0);
        assert_eq!(
            sample(&text, "agentguard_egress_bytes_total{direction=\"up\"}"),
            10.0
        );
        assert_eq!(
            sample(&text, "agentguard_egress_connect_seconds_count"),
            1.0
        );
        assert_eq!(sample(&text, "agentguard_policy_generation"), 1.0);
        // Draining: the open tunnel holds the proxy in its grace period, health says 503.
        signal(&child, "-TERM");
        wait_line(&lines, "shutting down");
        assert_eq!(get(&metrics, "/healthz").0, 503);
        assert_eq!(get(&metrics, "/nowhere").0, 404);
        drop(open);
        assert_eq!(child.wait().unwrap().code(), Some(0));
    })
    .await
    .unwrap();
}

#[test]
fn policy_and_the_allow_flags_are_exclusive() {
    let output = crate::agentguard(&[
        "egress-proxy",
        "--policy",
        "policy.toml",
        "--allow",
        "pkgs.example.test",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(crate::stderr(&output).contains("--allow"));
    let output = crate::agentguard(&["egress-proxy", "--watch", "--allow", "a.example.test"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(crate::stderr(&output).contains("--policy"));
}

//! `agentguard egress-proxy` as a real process: the readiness line, a tunnel, SIGTERM; with
//! `--audit-stdout`, one stream of its decisions and diagnostics on stdout.

use std::io::{BufRead, BufReader, Read as _, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

use agentguard_audit::{Event, Read};
use agentguard_test_support::{EchoServer, FakeDns, TestCa, TlsUpstream};

use crate::{agentguard, stderr};

#[tokio::test(flavor = "multi_thread")]
async fn prints_one_line_tunnels_and_shuts_down_on_sigterm() {
    let dns = FakeDns::start().await;
    let echo = EchoServer::try_start(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0)
        .await
        .unwrap();
    dns.answer("pkgs.example.test", &[echo.addr().ip()]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("egress.jsonl");
    let port = echo.addr().port();
    let args = proxy_args(&dns, port, &["--audit", log.to_str().unwrap()]);
    let log_path = log.clone();
    tokio::task::spawn_blocking(move || {
        let (mut child, mut stdout, addr) = spawn(&args);
        assert!(
            addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
            "the real port: {addr}"
        );
        tunnel(&addr, port);
        let (exit, rest) = terminate(&mut child, &mut stdout);
        assert_eq!(exit.code(), Some(0));
        assert_eq!(rest, "", "exactly one line on stdout");
        let summary =
            agentguard_audit::verify(std::fs::read(&log_path).unwrap().as_slice(), None).unwrap();
        assert_eq!(
            summary.events, 2,
            "the CONNECT decision and the tunnel close, flushed at shutdown"
        );
    })
    .await
    .unwrap();
}

/// The proxy's arguments: `pkgs.example.test` on `port`, resolved by `dns`, and `extra`.
fn proxy_args(dns: &FakeDns, port: u16, extra: &[&str]) -> Vec<String> {
    let port = port.to_string();
    let dns = dns.addr().to_string();
    let base = [
        "egress-proxy",
        "--allow",
        "pkgs.example.test",
        "--allow-port",
        &port,
        "--port",
        "0",
        "--allow-cidr",
        "127.0.0.2/32",
        "--nameserver",
        &dns,
    ];
    base.iter().chain(extra).map(|s| (*s).to_owned()).collect()
}

/// Starts the proxy; returns it, its stdout after the readiness line, and its address. The
/// lines before the readiness line are `before`'s.
fn spawn_noting(args: &[String], before: &mut String) -> (Child, BufReader<ChildStdout>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(args)
        .env_remove("AGENTGUARD_FLOOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while stdout.read_line(&mut line).unwrap() > 0 && !line.starts_with("listening on ") {
        before.push_str(&line);
        line.clear();
    }
    let addr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("readiness line: {line:?}"))
        .trim()
        .to_owned();
    (child, stdout, addr)
}

/// [`spawn_noting`] of a proxy that prints nothing before its readiness line.
pub(crate) fn spawn(args: &[String]) -> (Child, BufReader<ChildStdout>, String) {
    let mut before = String::new();
    let spawned = spawn_noting(args, &mut before);
    assert_eq!(before, "", "the readiness line comes first");
    spawned
}

/// One tunnel to the echo server on `port` through the proxy at `addr`, and back.
fn tunnel(addr: &str, port: u16) {
    let mut client = std::net::TcpStream::connect(addr).unwrap();
    write!(client, "CONNECT pkgs.example.test:{port} HTTP/1.1\r\n\r\n").unwrap();
    let mut head = [0u8; 39];
    client.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    client.write_all(b"through the binary").unwrap();
    let mut back = [0u8; 18];
    client.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"through the binary");
}

/// SIGTERM; returns how it exited and the rest of its stdout.
fn terminate(child: &mut Child, stdout: &mut BufReader<ChildStdout>) -> (ExitStatus, String) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    (exit, rest)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_audit_stdout_decisions_and_diagnostics_are_one_stream_of_its_run() {
    let dns = FakeDns::start().await;
    let echo = EchoServer::try_start(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0)
        .await
        .unwrap();
    dns.answer("pkgs.example.test", &[echo.addr().ip()]);
    let port = echo.addr().port();
    let mut args = vec!["-v".to_owned()];
    args.extend(proxy_args(
        &dns,
        port,
        &["--audit-stdout", "--run=agentguard-9-1-0"],
    ));
    tokio::task::spawn_blocking(move || {
        let mut before = String::new();
        let (mut child, mut stdout, addr) = spawn_noting(&args, &mut before);
        tunnel(&addr, port);
        let mut denied = std::net::TcpStream::connect(&addr).unwrap();
        write!(denied, "CONNECT evil.example.test:{port} HTTP/1.1\r\n\r\n").unwrap();
        let mut status = String::new();
        BufReader::new(&denied).read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 403"), "{status}");
        drop(denied);
        let (exit, rest) = terminate(&mut child, &mut stdout);
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(exit.code(), Some(0), "{stderr}");
        // -v's diagnostics are in the stream, as notes: the pod's log holds nothing else.
        assert_eq!(stderr, "", "nothing outside the stream");
        let mut reader = agentguard_audit::StreamReader::new("agentguard-9-1-0");
        let stream = format!("{before}listening on {addr}\n{rest}");
        let reads: Vec<Read> = stream.lines().map(|line| reader.line(line)).collect();
        let events: Vec<&Event> = reads
            .iter()
            .filter_map(|r| {
                if let Read::Event(e) = r {
                    Some(e)
                } else {
                    None
                }
            })
            .collect();
        let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
        assert!(reasons.contains(&"domain_not_allowed"), "{stream}");
        assert!(
            events
                .iter()
                .all(|e| e.subject["run"] == "agentguard-9-1-0")
        );
        assert!(
            reads
                .iter()
                .any(|r| matches!(r, Read::Note(n) if n.contains("shutting down"))),
            "{stream}"
        );
        assert!(
            reader.summary().complete(),
            "{:?}: {stream}",
            reader.summary()
        );
    })
    .await
    .unwrap();
}

/// How a cluster's proxy pod serves a route: `--route` names the secret's mounted file
/// (group-readable, as the kubelet mounts it for the pod's fsGroup), and no `--allow` is
/// needed.
#[tokio::test(flavor = "multi_thread")]
async fn a_route_given_as_an_argument_reads_its_secret_from_a_mounted_file() {
    let upstream_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let ca = TestCa::new("proxy route test CA");
    let upstream =
        TlsUpstream::start(upstream_ip, 0, ca.server_config(&["api.example.test"])).await;
    let dns = FakeDns::start().await;
    dns.answer("api.example.test", &[upstream_ip]);
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let secret_file = dir.path().join("token");
    std::fs::write(&secret_file, "mounted-secret-5e1d\n").unwrap();
    std::fs::set_permissions(
        &secret_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o440),
    )
    .unwrap();
    let spec = serde_json::json!({
        "name": "api",
        "secret_file": secret_file,
        "route": {
            "upstream": format!("https://api.example.test:{}/", upstream.addr().port()),
            "secret": "api",
            "header": "Authorization",
            "value": "Bearer {secret}",
            "paths": ["/echo"],
            "allow_cidrs": ["127.0.0.2/32"],
            "ca_file": ca_file,
        },
    });
    let args: Vec<String> = [
        "egress-proxy".to_owned(),
        "--port=0".to_owned(),
        format!("--nameserver={}", dns.addr()),
        "--audit-stdout".to_owned(),
        "--run=agentguard-9-2-0".to_owned(),
        format!("--route={spec}"),
    ]
    .into();
    let (stream, stderr) = tokio::task::spawn_blocking(move || {
        let mut before = String::new();
        let (mut child, mut stdout, addr) = spawn_noting(&args, &mut before);
        let mut client = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            client,
            "GET /api/echo HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // No --allow: CONNECT reaches nothing.
        let mut tunnel = std::net::TcpStream::connect(&addr).unwrap();
        write!(tunnel, "CONNECT api.example.test:443 HTTP/1.1\r\n\r\n").unwrap();
        let mut status = String::new();
        BufReader::new(&tunnel).read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 403"), "{status}");
        let (exit, rest) = terminate(&mut child, &mut stdout);
        assert_eq!(exit.code(), Some(0));
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (format!("{before}{rest}"), stderr)
    })
    .await
    .unwrap();
    assert_eq!(stderr, "");
    assert!(!stream.contains("mounted-secret-5e1d"), "{stream}");
    assert!(
        !stream.contains("readable by group"),
        "a mounted file is not a warning: {stream}"
    );
    let mut reader = agentguard_audit::StreamReader::new("agentguard-9-2-0");
    let routed: Vec<Event> = stream
        .lines()
        .filter_map(|line| reader.line(line).event())
        .filter(|e| e.kind == agentguard_audit::Kind::EgressRoute)
        .collect();
    assert_eq!(routed.len(), 1, "{stream}");
    assert_eq!(routed[0].reason, "ok");
    let seen = upstream.seen();
    assert!(
        seen[0]
            .head
            .contains("authorization: Bearer mounted-secret-5e1d"),
        "{}",
        seen[0].head
    );
}

#[test]
fn a_route_argument_that_is_not_a_route_is_refused() {
    let bad = r#"--route={"name": "api", "secret_file": "/nonexistent/token", "route": {"upstream": "https://api.example.test/", "secret": "api", "header": "Authorization", "value": "Bearer {secret}"}}"#;
    let out = agentguard(&["egress-proxy", "--port", "0", bad]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("/nonexistent/token"),
        "{}",
        stderr(&out)
    );
    let out = agentguard(&["egress-proxy", "--port", "0", "--route={}"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--route"), "{}", stderr(&out));
}

#[test]
fn audit_stdout_needs_a_run_that_is_a_dns_label() {
    let out = agentguard(&[
        "egress-proxy",
        "--allow",
        "pkgs.example.test",
        "--audit-stdout",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let args = [
        "egress-proxy",
        "--allow",
        "a.test",
        "--audit-stdout",
        "--run",
        "Not_A_Label",
    ];
    let out = agentguard(&args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("Not_A_Label"), "{}", stderr(&out));
}

#[test]
fn refuses_to_start_without_an_allowlist() {
    let out = agentguard(&["egress-proxy", "--port", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no --allow given"),
        "{}",
        stderr(&out)
    );
    let bad = agentguard(&["egress-proxy", "--allow", "*.", "--port", "0"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
}

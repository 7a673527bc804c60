//! `agentguard egress-proxy` as a real process: the readiness line, a tunnel, SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};

use agentguard_test_support::{EchoServer, FakeDns};

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
    let args: Vec<String> = [
        "egress-proxy",
        "--allow",
        "pkgs.example.test",
        "--allow-port",
        &port.to_string(),
        "--port",
        "0",
        "--allow-cidr",
        "127.0.0.2/32",
        "--nameserver",
        &dns.addr().to_string(),
        "--audit",
        log.to_str().unwrap(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let log_path = log.clone();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("readiness line: {line:?}"))
            .trim()
            .to_owned();
        assert!(
            addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
            "the real port: {addr}"
        );

        let mut client = std::net::TcpStream::connect(&addr).unwrap();
        write!(client, "CONNECT pkgs.example.test:{port} HTTP/1.1\r\n\r\n").unwrap();
        let mut head = [0u8; 39];
        client.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
        client.write_all(b"through the binary").unwrap();
        let mut back = [0u8; 18];
        client.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"through the binary");
        drop(client);

        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = child.wait().unwrap();
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
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

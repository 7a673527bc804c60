//! The binary under attack, load and faults: signed logs from every writer, escaped client
//! text, no panic on extreme flags or unwritable outputs, the descriptor cap, and SIGTERM
//! within the grace whatever the connections wait for.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentguard_test_support::{EchoServer, FakeDns};

use crate::{agentguard, stderr, stdout};

const KEY: &str = "an-hmac-key-of-at-least-16-bytes";

/// Starts `agentguard egress-proxy ARGS`, behind `prefix` (such as `prlimit ...`); returns
/// the child and the address from its readiness line.
fn proxy(prefix: &[&str], args: &[String], env: &[(&str, &str)]) -> (Child, String) {
    let (program, pre) = match prefix.split_first() {
        Some((program, rest)) => (*program, rest.to_vec()),
        None => (env!("CARGO_BIN_EXE_agentguard"), Vec::new()),
    };
    let mut command = Command::new(program);
    command.args(&pre);
    if !prefix.is_empty() {
        command.arg(env!("CARGO_BIN_EXE_agentguard"));
    }
    let mut child = command
        .arg("egress-proxy")
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("readiness line: {line:?}"))
        .trim()
        .to_owned();
    (child, addr)
}

fn args(dns: &FakeDns, port: u16, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--allow",
        "*.example.test",
        "--allow-port",
        &port.to_string(),
        "--port",
        "0",
        "--allow-cidr",
        "127.0.0.2/32",
        "--nameserver",
        &dns.addr().to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// SIGTERM, then the exit status and stderr; a proxy still running 20 s later is killed and
/// reported as no status.
fn stop(mut child: Child) -> (Option<i32>, String) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (code, err)
}

/// Sends raw bytes to the proxy and reads its answer until it closes (bounded).
fn ask(addr: &str, raw: &[u8]) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(raw).unwrap();
    let mut all = Vec::new();
    let _ = stream.read_to_end(&mut all);
    String::from_utf8_lossy(&all).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_writer_signs_with_a_key_from_the_environment() {
    let dns = FakeDns::start().await;
    let echo = EchoServer::try_start(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0)
        .await
        .unwrap();
    dns.answer("pkgs.example.test", &[echo.addr().ip()]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("egress.jsonl");
    let log_text = log.to_str().unwrap().to_owned();
    let extra = ["--audit", &log_text, "--audit-key-env", "AG_KEY"];
    let args = args(&dns, echo.addr().port(), &extra);
    let port = echo.addr().port();
    tokio::task::spawn_blocking(move || {
        let (child, addr) = proxy(&[], &args, &[("AG_KEY", KEY)]);
        let answer = ask(
            &addr,
            format!("CONNECT evil.example.org:{port} HTTP/1.1\r\n\r\n").as_bytes(),
        );
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(stop(child).0, Some(0));
        let checked = Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(["audit", "verify", &log_text, "--key-env", "AG_KEY"])
            .env("AG_KEY", KEY)
            .output()
            .unwrap();
        assert!(
            stdout(&checked).contains("every HMAC verified"),
            "{}{}",
            stdout(&checked),
            stderr(&checked)
        );
        // A key too short, or missing, is refused before anything starts.
        for env in [vec![("AG_KEY", "short")], vec![]] {
            let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
                .arg("egress-proxy")
                .args(&args)
                .env_remove("AG_KEY")
                .envs(env)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
            assert!(
                stderr(&out).contains("--audit-key-env AG_KEY"),
                "{}",
                stderr(&out)
            );
        }
    })
    .await
    .unwrap();
}

#[test]
fn fetch_and_run_sign_too() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fetch.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args([
            "fetch",
            "https://evil.example.org/",
            "--allow",
            "pkgs.example.test",
        ])
        .args([
            "--audit",
            log.to_str().unwrap(),
            "--audit-key-env",
            "AG_KEY",
        ])
        .env("AG_KEY", KEY)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(123), "{}", stderr(&out));
    let engine = agentguard_test_support::FakeEngine::new();
    let cfg = dir.path().join("agentguard.toml");
    std::fs::write(
        &cfg,
        format!(
            "image = \"localhost/tools:latest\"\nengine = \"{}\"\n\n[commands]\nok = [\"true\"]\n\n[audit]\npath = \"run.jsonl\"\nkey_env = \"AG_KEY\"\n",
            engine.path().display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["run", "--config", cfg.to_str().unwrap(), "ok"])
        .env("AG_KEY", KEY)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for name in ["fetch.jsonl", "run.jsonl"] {
        let path = dir.path().join(name);
        let checked = Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args([
                "audit",
                "verify",
                path.to_str().unwrap(),
                "--key-env",
                "AG_KEY",
            ])
            .env("AG_KEY", KEY)
            .output()
            .unwrap();
        assert!(
            stdout(&checked).contains("every HMAC verified"),
            "{name}: {}",
            stdout(&checked)
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["run", "--config", cfg.to_str().unwrap(), "ok"])
        .env("AG_KEY", "short")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn client_text_is_escaped_in_diagnostics_and_in_the_table() {
    let dns = FakeDns::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("egress.jsonl");
    let log_text = log.to_str().unwrap().to_owned();
    let mut args = args(&dns, 443, &["--audit", &log_text]);
    args.splice(0..0, ["-v".to_owned(), "egress-proxy".to_owned()]);
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line.trim().trim_start_matches("listening on ").to_owned();
        let answer = ask(&addr, b"CONNECT \x1b[31mred\x1b[0m:443 HTTP/1.1\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        let (code, err) = stop(child);
        assert_eq!(code, Some(0));
        assert!(
            !err.contains('\u{1b}'),
            "a raw ESC in the diagnostics: {err:?}"
        );
        assert!(err.contains("\\u{1b}"), "{err}");
        let table = agentguard(&["audit", "show", &log_text]);
        assert!(!stdout(&table).contains('\u{1b}'), "{:?}", stdout(&table));
        assert!(
            stdout(&table).contains("\\u{1b}[31mred"),
            "{}",
            stdout(&table)
        );
    })
    .await
    .unwrap();
}

#[test]
fn extreme_flags_are_usage_errors_and_unwritable_outputs_never_panic() {
    for extra in [
        ["--max-connections", "0"],
        ["--max-connections", "99999999999"],
        ["--idle-timeout", "99999999999999"],
        ["--connect-timeout", "0"],
        ["--half-close-timeout", "0"],
        ["--grace", "18446744073709551615"],
    ] {
        let out = agentguard(
            &[
                &[
                    "egress-proxy",
                    "--allow",
                    "pkgs.example.test",
                    "--port",
                    "0",
                ][..],
                &extra[..],
            ]
            .concat(),
        );
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["classify", "not-an-ip"])
        .stderr(full.try_clone().unwrap())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unwritable stderr is no panic"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["classify", "10.0.0.1"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("No space left"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_descriptor_limit_caps_connections_with_503_never_dns_failure() {
    let dns = FakeDns::start().await;
    let echo = EchoServer::try_start(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0)
        .await
        .unwrap();
    dns.answer("pkgs.example.test", &[echo.addr().ip()]);
    let port = echo.addr().port();
    // Idle tunnels hold two descriptors each: 60 of them need more than 116.
    for (extra, cap, clients) in [
        (vec!["--grace", "0"], Some(6), 30),
        (vec!["--grace", "0", "--max-connections", "1000"], None, 60),
    ] {
        let args = args(&dns, port, &extra);
        let answers = tokio::task::spawn_blocking(move || {
            // 116 descriptors: (116 - 80) / 6 = 6 tunnels by default.
            let (child, addr) = proxy(&["prlimit", "--nofile=116:116"], &args, &[]);
            let mut held = Vec::new();
            let mut answers = Vec::new();
            for _ in 0..clients {
                let mut stream = std::net::TcpStream::connect(&addr).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                stream
                    .write_all(
                        format!("CONNECT pkgs.example.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
                    )
                    .unwrap();
                let mut head = [0u8; 12];
                let answer = match stream.read_exact(&mut head) {
                    Ok(()) => String::from_utf8_lossy(&head).into_owned(),
                    Err(e) => format!("no answer: {e}"),
                };
                let mut rest = [0u8; 512];
                let reason = if answer.contains(" 503") || answer.contains(" 502") {
                    let n = stream.read(&mut rest).unwrap_or(0);
                    String::from_utf8_lossy(&rest[..n]).into_owned()
                } else {
                    String::new()
                };
                answers.push(format!("{answer} {reason}"));
                held.push(stream);
            }
            let (code, err) = stop(child);
            assert_eq!(code, Some(0), "{err}");
            answers
        })
        .await
        .unwrap();
        let ok = answers
            .iter()
            .filter(|a| a.starts_with("HTTP/1.1 200"))
            .count();
        for answer in &answers {
            assert!(
                answer.starts_with("HTTP/1.1 200")
                    || answer.contains("too_many_connections")
                    || answer.contains("out_of_descriptors"),
                "every client is answered at once, and never dns_failure: {answer}"
            );
        }
        match cap {
            Some(cap) => assert_eq!(ok, cap, "{answers:?}"),
            None => assert!(
                answers.iter().any(|a| a.contains("out_of_descriptors")),
                "past the descriptors, the answer says so: {answers:?}"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_the_process_within_the_grace_whatever_the_connections_wait_for() {
    let dns = FakeDns::start().await;
    dns.silent("stalled.example.test");
    let port = 443;
    let args = args(&dns, port, &["--grace", "1"]);
    tokio::task::spawn_blocking(move || {
        let (child, addr) = proxy(&[], &args, &[]);
        let mut slowloris = std::net::TcpStream::connect(&addr).unwrap();
        slowloris.write_all(b"CONNECT pkgs.exa").unwrap();
        let mut resolving = std::net::TcpStream::connect(&addr).unwrap();
        resolving
            .write_all(b"CONNECT stalled.example.test:443 HTTP/1.1\r\n\r\n")
            .unwrap();
        let started = Instant::now();
        let (code, _) = stop(child);
        let took = started.elapsed();
        assert_eq!(code, Some(0));
        // The head deadline is 10 s and the resolver waits longer: neither holds the exit.
        assert!(took < Duration::from_secs(5), "exited after {took:?}");
    })
    .await
    .unwrap();
}

/// Values the engine, the proxy or the cluster would silently ignore, misread or fail on
/// mid-run are refused at load: exit 2, naming the key, before anything starts.
#[test]
fn config_bounds_are_checked_at_load_and_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let engine = agentguard_test_support::FakeEngine::new();
    let local = format!(
        "image = \"localhost/tools:latest\"\nengine = \"{}\"\n",
        engine.path().display()
    );
    let cluster = "image = \"localhost/tools@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nengine = \"kubernetes\"\n[kubernetes]\nnamespace = \"agentguard\"\nproxy_image = \"localhost/agentguard@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n";
    let egress = "[commands.t]\nargv = [\"true\"]\nnetwork = \"egress\"\n";
    for (base, body, needle) in [
        (
            &*local,
            "timeout = 9223372036854775807\n[commands]\nt = [\"true\"]\n",
            "timeout",
        ),
        (
            &*local,
            "cpus = 0.001\n[commands]\nt = [\"true\"]\n",
            "at least 0.01",
        ),
        (&*local, "cpus = 1e10\n[commands]\nt = [\"true\"]\n", "cpus"),
        (
            &*local,
            "cpus = \"4096\"\n[commands]\nt = [\"true\"]\n",
            "CPUs",
        ),
        (
            &*local,
            &format!("[egress]\nallow = [\"pkgs.example.com\"]\nallow_ports = []\n{egress}"),
            "[egress] allow_ports: [] (an empty list) allows no port",
        ),
        (
            &*local,
            "[commands]\nt = [\"true\"]\n[fetch]\nallow = [\"pkgs.example.com\"]\nallow_ports = []\n",
            "[fetch] allow_ports: [] (an empty list) allows no port",
        ),
        (
            &*local,
            &format!("[egress]\nallow = [\"--no-sni-check\"]\n{egress}"),
            "begins or ends with `-`",
        ),
        (
            &*local,
            &format!("[egress]\nallow = [\"good.example.test:443\"]\n{egress}"),
            "host with a port",
        ),
        (
            &*local,
            &format!(
                "[egress]\nallow = [\"pkgs.example.com\"]\n{egress}egress_allow = [\"-x.example.com\"]\n"
            ),
            "commands.t.egress_allow",
        ),
        (
            cluster,
            &format!(
                "[egress]\nallow = [\"pkgs.example.com\"]\nnameservers = [\"127.0.0.1:53\"]\n{egress}"
            ),
            "[egress] nameservers",
        ),
        (
            cluster,
            &format!("[egress]\nallow = [\"--no-sni-check\"]\n{egress}"),
            "[egress] allow",
        ),
    ] {
        let path = dir.path().join("agentguard.toml");
        std::fs::write(&path, format!("{base}{body}")).unwrap();
        let out = agentguard(&["run", "--config", path.to_str().unwrap(), "--dry-run", "t"]);
        assert_eq!(out.status.code(), Some(2), "{body}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{body}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    assert!(engine.calls().is_empty(), "no engine was called");
}

//! `agentguard fetch` as a real process against real servers on loopback.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Output};
use std::sync::Arc;

use agentguard_test_support::{FakeDns, RecordingListener, TestCa, TlsUpstream};

const GOOD: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

struct Setup {
    dns: FakeDns,
    upstream: TlsUpstream,
    ca_file: tempfile::NamedTempFile,
}

async fn setup() -> Setup {
    let dns = FakeDns::start().await;
    let ca = TestCa::new("cli test CA");
    let upstream = TlsUpstream::start(GOOD, 0, ca.server_config(&["pkgs.example.test"])).await;
    dns.answer("pkgs.example.test", &[GOOD]);
    let ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca_file.path(), ca.pem()).unwrap();
    Setup {
        dns,
        upstream,
        ca_file,
    }
}

impl Setup {
    fn args(&self, path: &str) -> Vec<String> {
        let port = self.upstream.addr().port();
        [
            "fetch".to_owned(),
            format!("https://pkgs.example.test:{port}{path}"),
            "--allow".into(),
            "pkgs.example.test".into(),
            "--allow-port".into(),
            port.to_string(),
            "--allow-cidr".into(),
            "127.0.0.2/32".into(),
            "--nameserver".into(),
            self.dns.addr().to_string(),
            "--ca-file".into(),
            self.ca_file.path().to_str().unwrap().to_owned(),
        ]
        .to_vec()
    }
}

/// Runs the binary off the async runtime, with extra environment variables.
async fn run(args: Vec<String>, env: Vec<(String, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(&args)
            .envs(env)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn prints_the_body_and_audits() {
    let s = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fetch.jsonl");
    let mut args = s.args("/simple/");
    args.extend(["--audit".into(), log.to_str().unwrap().to_owned()]);
    let out = run(args, vec![]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello from 127.0.0.2\n");
    let summary = agentguard_audit::verify(std::fs::read(&log).unwrap().as_slice(), None).unwrap();
    assert_eq!(summary.events, 1);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("\"kind\":\"fetch\",\"decision\":\"allow\"")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn json_has_status_headers_body_and_the_address_dialed() {
    let s = setup().await;
    let mut args = s.args("/");
    args.push("--json".into());
    let out = run(args, vec![]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["status"], 200);
    assert_eq!(value["body"], "hello from 127.0.0.2\n");
    assert_eq!(value["dialed"], s.upstream.addr().to_string());
    assert!(
        value["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[0] == "content-type")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_variables_are_never_used() {
    let s = setup().await;
    let recorder = RecordingListener::start().await;
    let proxy = format!("http://{}", recorder.addr());
    let env = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .iter()
    .map(|k| ((*k).to_owned(), proxy.clone()))
    .chain([("NO_PROXY".to_owned(), "".to_owned())])
    .collect();
    let out = run(s.args("/"), env).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello from 127.0.0.2\n");
    assert_eq!(recorder.connections(), 0, "the proxy listener saw nothing");
    assert_eq!(
        s.upstream.seen().len(),
        1,
        "the request went straight to the pinned address"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_prints_nothing_and_names_the_reason() {
    let s = setup().await;
    let mut args = s.args("/");
    args[1] = args[1].replace("pkgs.example.test", "evil.example.test");
    let out = run(args, vec![]).await;
    assert_eq!(out.status.code(), Some(123));
    assert_eq!(out.stdout, b"");
    assert!(
        text(&out.stderr).contains("fetch refused (domain_not_allowed)"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(s.dns.total_queries(), 0);

    let redirect = run(s.args("/redirect"), vec![]).await;
    assert_eq!(redirect.status.code(), Some(123));
    assert_eq!(redirect.stdout, b"");
    assert!(
        text(&redirect.stderr).contains("redirect_refused")
            && text(&redirect.stderr).contains("elsewhere.example.test")
    );

    let mut big = s.args("/big/5000");
    big.extend(["--max-bytes".into(), "4096".into()]);
    let big = run(big, vec![]).await;
    assert_eq!(big.status.code(), Some(123));
    assert!(text(&big.stderr).contains("body_too_large"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_2xx_status_prints_the_body_and_exits_1() {
    let s = setup().await;
    let out = run(s.args("/status/404"), vec![]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "status 404\n");
    assert!(text(&out.stderr).contains("HTTP status 404"));
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_errors_exit_2() {
    let s = setup().await;
    let out = run(
        vec!["fetch".into(), "https://pkgs.example.test/".into()],
        vec![],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no --allow given"));
    let mut zero = s.args("/");
    zero.extend(["--allow-port".into(), "0".into()]);
    assert_eq!(run(zero, vec![]).await.status.code(), Some(2));
    let mut bad_ns = s.args("/");
    bad_ns.extend(["--nameserver".into(), "nonsense".into()]);
    let out = run(bad_ns, vec![]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("\"nonsense\""));
    let _ = Arc::new(());
}

//! Real clients through the proxy: curl with `--proxy`, and Python's urllib with `HTTPS_PROXY`,
//! fetching from a TLS upstream with the test CA. The clients never resolve the name
//! themselves: they send `CONNECT name:port` and the proxy resolves it through the fake DNS.
//! The upstream's port is a TLS port of the proxy, so every fetch passes the TLS name check.

use std::process::{Command, Output};

use agentguard_egress::EgressProxy;
use agentguard_test_support::{CLIENT_ENV as CLEAR, TestCa, TlsUpstream};

use crate::{Env, GOOD};

struct Setup {
    env: Env,
    upstream: TlsUpstream,
    proxy: EgressProxy,
    ca_file: tempfile::NamedTempFile,
}

async fn setup() -> Setup {
    let env = Env::start().await;
    let ca = TestCa::new("egress client test CA");
    let upstream = TlsUpstream::start(GOOD, 0, ca.server_config(&["pkgs.example.test"])).await;
    let proxy = env
        .proxy_for(
            env.policy(&["pkgs.example.test"])
                .allow_port(upstream.addr().port()),
        )
        .tls_ports([upstream.addr().port()])
        .start()
        .await
        .unwrap();
    let ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca_file.path(), ca.pem()).unwrap();
    Setup {
        env,
        upstream,
        proxy,
        ca_file,
    }
}

/// Runs a client with the variables above removed, then `env` set.
async fn run(mut command: Command, env: &[(&str, String)]) -> Output {
    for var in CLEAR {
        command.env_remove(var);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    tokio::task::spawn_blocking(move || {
        command
            .output()
            .expect("the client program runs (curl and python3 are installed by cargo xtask setup)")
    })
    .await
    .unwrap()
}

fn curl(s: &Setup, host: &str) -> Command {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "20"])
        .args(["--proxy", &format!("http://{}", s.proxy.local_addr())])
        .args(["--cacert", s.ca_file.path().to_str().unwrap()])
        .arg(format!("https://{host}:{}/", s.upstream.addr().port()));
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_fetches_through_the_proxy() {
    let s = setup().await;
    let out = run(curl(&s, "pkgs.example.test"), &[]).await;
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from 127.0.0.2\n"
    );
    let seen = s.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].sni.as_deref(),
        Some("pkgs.example.test"),
        "TLS went end to end, through the tunnel"
    );
    assert_eq!(
        s.env.dns.queries("pkgs.example.test").len(),
        2,
        "the proxy resolved the name (A and AAAA)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_sees_the_refusal() {
    let s = setup().await;
    let out = run(curl(&s, "evil.example.test"), &[]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("403"), "curl reports the proxy's 403: {err}");
    assert!(s.upstream.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn python_urllib_fetches_with_https_proxy() {
    let s = setup().await;
    let script = "import ssl, sys, urllib.request\n\
                  ctx = ssl.create_default_context(cafile=sys.argv[2])\n\
                  print(urllib.request.urlopen(sys.argv[1], context=ctx, timeout=20).read().decode(), end='')\n";
    let mut command = Command::new("python3");
    command
        .args(["-c", script])
        .arg(format!(
            "https://pkgs.example.test:{}/from-python",
            s.upstream.addr().port()
        ))
        .arg(s.ca_file.path());
    let out = run(
        command,
        &[("HTTPS_PROXY", format!("http://{}", s.proxy.local_addr()))],
    )
    .await;
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from 127.0.0.2\n"
    );
    assert!(
        s.upstream.seen()[0]
            .head
            .starts_with("GET /from-python HTTP/1.1"),
        "{:?}",
        s.upstream.seen()
    );
}

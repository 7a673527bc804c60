//! `agentguard doctor --config FILE` (issue 38): what one config needs, each a line `OK`,
//! `WARN` or `FAIL` with its fix, exit 1 on any `FAIL`. The engine is test-support's fake, so
//! a command's program is looked up by the same `sh` script on this host; the egress names go
//! to a local fake DNS server (nothing is dialed); real engines are in e2e
//! (`doctor_config_fails_a_program_the_image_lacks`).

use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::MetadataExt;

use agentguard_test_support::{FakeDns, FakeEngine};

use crate::{agentguard, stdout};

const SECRET_ENV: &str = "AGENTGUARD_TEST_DOCTOR_TOKEN_UNSET";

#[tokio::test(flavor = "multi_thread")]
async fn doctor_config_fails_a_missing_program_an_unresolvable_host_and_a_missing_secret_by_name() {
    let dns = FakeDns::start().await;
    dns.answer(
        "good.example.test",
        &[IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))],
    );
    dns.answer(
        "private.example.test",
        &[IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))],
    );
    dns.nxdomain("gone.example.test");
    let engine = FakeEngine::new();
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(workspace.join("out")).unwrap();
    std::fs::create_dir_all(workspace.join("locked")).unwrap();
    std::fs::write(workspace.join(".env"), "X=1").unwrap();
    // A workspace a writing command may use is an ordinary user's when agentguard is root;
    // `locked` stays this process's own, which that user cannot write when this is root.
    let root = std::fs::metadata(&workspace).unwrap().uid() == 0;
    for path in [workspace.clone(), workspace.join("out")] {
        let _ = std::os::unix::fs::chown(path, Some(1000), Some(1000));
    }
    let config = dir.path().join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            r#"image = "localhost/tools:1"
engine = "{engine}"
workspace = "ws"
hidden = [".env", "*.key"]

[egress]
nameservers = ["{dns}"]
allow = ["good.example.test", "gone.example.test", "private.example.test", "*.wild.example.test"]
allow_cidrs = ["127.0.0.2/32"]

[secrets]
api = {{ env = "{SECRET_ENV}" }}

[routes.api]
upstream = "https://good.example.test/"
secret = "api"
header = "Authorization"
value = "Bearer {{secret}}"
methods = ["GET"]
paths = ["/"]
env = "API_URL"

[commands.present]
argv = ["sh", "-c", "true"]
writable = ["out", "locked"]

[commands.ghost]
argv = ["agentguard-no-such-program", "--version"]

[commands.fetcher]
argv = ["sh", "-c", "true"]
network = "egress"
routes = ["api"]
"#,
            engine = engine.path().display(),
            dns = dns.addr(),
        ),
    )
    .unwrap();
    let config_arg = config.to_str().unwrap().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentguard"));
        command
            .args(["doctor", "--config", &config_arg])
            .env_remove("AGENTGUARD_LOG")
            .env_remove("AGENTGUARD_CONFIG")
            .env_remove(SECRET_ENV);
        command.output().unwrap()
    })
    .await
    .unwrap();
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let line = |tag: &str, needles: &[&str]| {
        said.lines()
            .any(|l| l.starts_with(tag) && needles.iter().all(|n| l.contains(n)))
    };
    for (tag, needles) in [
        ("OK  ", &["agentguard.toml loads: 3 command(s)"][..]),
        (
            "FAIL",
            &[
                "command ghost",
                "agentguard-no-such-program",
                "is not in image",
            ],
        ),
        (
            "OK  ",
            &["command present", "its program sh is", "executable"],
        ),
        (
            "FAIL",
            &["gone.example.test", "does not resolve", "NXDOMAIN"],
        ),
        (
            "FAIL",
            &["private.example.test", "runs would refuse it", "10.1.2.3"],
        ),
        (
            "OK  ",
            &["good.example.test", "127.0.0.2", "which runs may reach"],
        ),
        ("OK  ", &["*.wild.example.test", "wildcard"]),
        ("FAIL", &["secret \"api\"", SECRET_ENV, "not set"]),
        ("WARN", &["localhost/tools:1", "pinned by tag only"]),
        (
            "OK  ",
            &["hidden pattern \".env\" masks 1 path(s) now: .env"],
        ),
        ("OK  ", &["hidden pattern \"*.key\" matches nothing now"]),
        ("OK  ", &["writable path \"out\" is a real folder"]),
    ] {
        assert!(
            line(tag, needles),
            "no `{tag}` line with {needles:?}:\n{said}"
        );
    }
    if root {
        assert!(
            line(
                "WARN",
                &[
                    "writable path \"locked\"",
                    "owned by 0:0",
                    "cannot write there"
                ]
            ),
            "{said}"
        );
    }
    // Every FAIL carries its fix on the next line.
    let lines: Vec<&str> = said.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("FAIL") {
            assert!(
                lines
                    .get(i + 1)
                    .is_some_and(|next| next.trim_start().starts_with("fix: ")),
                "{l} has no fix:\n{said}"
            );
        }
    }
    // A file named with --config that is not there is a failed check, not the default.
    let missing = dir.path().join("nowhere.toml");
    let out = agentguard(&["doctor", "--config", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(&format!("FAIL no config file at {}", missing.display())),
        "{}",
        stdout(&out)
    );
}

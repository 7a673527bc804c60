//! `agentguard run` of `network = "egress"` commands without an engine: the config keys,
//! `--dry-run`, `--json`'s egress counts, the audit log, and the refusals that happen before
//! any container starts. The fake engine runs the "container" as a host process; the relay,
//! the run's proxy, the DNS server, the TLS upstream and curl are real. Real containers on
//! every engine and runtime are in the e2e suite.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agentguard_test_support::{FakeDns, FakeEngine, TestCa, TlsUpstream, free_port};

use crate::{agentguard, stderr, stdout};

const UPSTREAM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

pub(crate) struct World {
    pub(crate) dir: tempfile::TempDir,
    engine: FakeEngine,
    _dns: FakeDns,
    pub(crate) upstream: TlsUpstream,
    pub(crate) config: PathBuf,
}

impl World {
    pub(crate) async fn start() -> World {
        let ca = TestCa::new("cli egress test CA");
        let upstream =
            TlsUpstream::start(UPSTREAM, 0, ca.server_config(&["good.example.test"])).await;
        let dns = FakeDns::start().await;
        dns.answer("good.example.test", &[UPSTREAM]);
        dns.answer("evil.example.test", &[UPSTREAM]);
        // Not public, and not in allow_cidrs: refused even by an observe run, never dialed.
        dns.answer(
            "private.example.test",
            &[IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
        );
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let engine = FakeEngine::new();
        let port = upstream.addr().port();
        let curl = |host: &str| {
            format!(
                "curl -sS --max-time 20 --cacert {} https://{host}:{port}/ 2>&1; echo \" curl=$?\"",
                ca_file.display()
            )
        };
        let text = format!(
            r#"# The test's config: policy suggest --write keeps this comment.
image = "localhost/tools:latest"
engine = "{engine}"
network = "egress"
timeout = 60

[egress]
allow = ["good.example.test"]
allow_ports = [{port}]
allow_cidrs = ["127.0.0.2/32"]
nameservers = ["{dns}"]
proxy_port = {proxy}

[audit]
path = "audit.jsonl"

[commands]
sleepy = ["sleep", "30"]

[commands.offline]
argv = ["echo", "offline"]
network = "none"

[commands.good]
argv = ["sh", "-c", "{good}"]
description = "Fetch the allowed host"

[commands.both]
argv = ["sh", "-c", "{good}; {evil}"]
network = "egress"

[commands.other]
argv = ["sh", "-c", "{evil}"]
egress_allow = ["evil.example.test"]

[commands.learn]
argv = ["sh", "-c", "{good}; {evil}; {private}"]

[commands.flood]
argv = ["python3", "-c", "{flood}", "{port}"]

[commands.flood_many]
argv = ["python3", "-c", "{flood}", "{port}", "25"]
"#,
            engine = engine.path().display(),
            dns = dns.addr(),
            proxy = free_port(),
            good = curl("good.example.test").replace('"', "\\\""),
            evil = curl("evil.example.test").replace('"', "\\\""),
            private = curl("private.example.test").replace('"', "\\\""),
            flood = FLOOD
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n"),
        );
        let config = dir.path().join("agentguard.toml");
        std::fs::write(&config, text).unwrap();
        std::fs::create_dir(dir.path().join("runs")).unwrap();
        std::fs::set_permissions(
            dir.path().join("runs"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        World {
            dir,
            engine,
            _dns: dns,
            upstream,
            config,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentguard"));
        command
            .args(["run", "--config", self.config.to_str().unwrap()])
            .args(args)
            .env_remove("AGENTGUARD_LOG")
            .env("AGENTGUARD_RUN_DIR", self.runs());
        command
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn runs(&self) -> PathBuf {
        self.dir.path().join("runs")
    }

    fn runs_left(&self) -> usize {
        std::fs::read_dir(self.runs()).unwrap().count()
    }

    pub(crate) fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// 3000 refused CONNECTs through the relay, one after another; prints how many were made.
/// 3,000 refused CONNECTs to three targets (a name off the list, a port off the list, an IP
/// literal), or with an argument N, one each to N names off the list.
const FLOOD: &str = "import os, socket, sys\nport = int(os.environ['HTTPS_PROXY'].rsplit(':', 1)[1])\nup = sys.argv[1].encode()\ntargets = [b'evil.example.test:' + up, b'good.example.test:22', b'10.0.0.1:' + up]\nif len(sys.argv) > 2:\n    targets = [b'h%d.example.test:%s' % (n, up) for n in range(int(sys.argv[2]))]\ncount = 3000 if len(sys.argv) == 2 else len(targets)\nfor i in range(count):\n    s = socket.create_connection(('127.0.0.1', port))\n    s.sendall(b'CONNECT ' + targets[i % len(targets)] + b' HTTP/1.1\\r\\n\\r\\n')\n    assert s.recv(100).startswith(b'HTTP/1.1 403'), i\n    s.close()\nprint('refused', i + 1)";

/// Runs a blocking body on the blocking pool, so the fake DNS and the upstream keep serving.
pub(crate) async fn blocking<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(body).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn json_counts_the_decisions_of_the_runs_proxy_and_the_audit_log_has_both() {
    let world = World::start().await;
    let world = blocking(move || {
        let out = world.run(&["both", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        assert_eq!(
            (&json["egress"]["allowed"], &json["egress"]["denied"]),
            (&serde_json::json!(1), &serde_json::json!(1))
        );
        let refused = &json["egress"]["refused"];
        assert_eq!(refused.as_array().unwrap().len(), 1, "{refused}");
        assert_eq!(refused[0]["reason"], "domain_not_allowed", "{refused}");
        assert_eq!(refused[0]["count"], 1, "{refused}");
        let text = json["stdout"].as_str().unwrap();
        assert!(text.contains("hello from 127.0.0.2"), "{text}");
        assert!(text.contains("403"), "the off-list host is refused: {text}");
        let container = json["container"].as_str().unwrap().to_owned();
        let connects: Vec<_> = world
            .audit()
            .into_iter()
            .filter(|e| e["kind"] == "egress_connect")
            .collect();
        assert_eq!(connects.len(), 2, "{connects:?}");
        assert!(
            connects
                .iter()
                .all(|e| e["subject"]["run"] == container.as_str())
        );
        let reasons: Vec<_> = connects
            .iter()
            .map(|e| e["reason"].as_str().unwrap())
            .collect();
        assert_eq!(reasons, ["ok", "domain_not_allowed"]);
        let log = world.dir.path().join("audit.jsonl");
        let verify = agentguard(&["audit", "verify", log.to_str().unwrap()]);
        assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
        assert_eq!(world.runs_left(), 0, "the run folder is removed");
        world
    })
    .await;
    assert_eq!(
        world.upstream.seen().len(),
        1,
        "only the allowed host reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commands_own_allowlist_replaces_the_shared_one_and_none_has_zero_counts() {
    let world = World::start().await;
    blocking(move || {
        let out = world.run(&["other", "--json"]);
        let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        assert_eq!(
            json["egress"],
            serde_json::json!({"allowed": 1, "denied": 0, "refused": []})
        );
        // The TLS upstream has no certificate for this name: allowed by the proxy, refused by curl.
        assert!(!json["stdout"].as_str().unwrap().contains("curl=0"));
        let out = world.run(&["offline", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        assert_eq!(
            json["egress"],
            serde_json::json!({"allowed": 0, "denied": 0, "refused": []})
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_shows_the_relay_its_mounts_and_the_proxy_variables() {
    let world = World::start().await;
    blocking(move || {
        let out = world.run(&["good", "--dry-run"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let argv = stdout(&out);
        let runs = world.runs();
        for needle in [
            "--network none",
            &format!("source={}/agentguard-", runs.display()),
            "/relay,target=/run/agentguard/relay,readonly",
            "/proxy.sock,target=/run/agentguard/proxy.sock,readonly",
            "--env NO_PROXY= --env no_proxy=",
            "--entrypoint /run/agentguard/relay localhost/tools:latest",
            " --receipt 65534:65534 ",
            " /run/agentguard/proxy.sock -- sh -c ",
        ] {
            assert!(argv.contains(needle), "{needle:?} missing from {argv}");
        }
        assert!(argv.contains("HTTPS_PROXY=http://127.0.0.1:"), "{argv}");
        assert_eq!(world.runs_left(), 0, "a dry run creates nothing");
        // A command without a network starts with the relay too, for its isolation receipt
        // alone: nothing of a proxy.
        let offline = stdout(&world.run(&["offline", "--dry-run"]));
        assert!(
            offline.contains("--entrypoint /run/agentguard/relay")
                && offline.contains(" --receipt 65534:65534 -- "),
            "{offline}"
        );
        assert!(
            !offline.contains("proxy.sock") && !offline.contains("PROXY"),
            "{offline}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_dynamic_relay_refuses_the_run_with_125_before_the_engine() {
    let world = World::start().await;
    blocking(move || {
        for (relay, needle) in [
            ("/nonexistent/agentguard-relay", "cannot be read"),
            ("/bin/sh", "dynamically linked"),
        ] {
            let out = world
                .command(&["good"])
                .env("AGENTGUARD_RELAY", relay)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
            let err = stderr(&out);
            assert!(err.contains(relay) && err.contains(needle), "{err}");
            assert!(
                err.contains("AGENTGUARD_RELAY"),
                "says how to fix it: {err}"
            );
        }
        assert!(
            world.engine.calls().iter().all(|c| !c.starts_with("run")),
            "no container was started"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_the_proxy_removes_the_run_folder_and_kills_the_container() {
    let world = World::start().await;
    blocking(move || {
        let mut child = world.command(&["sleepy"]).spawn().unwrap();
        // Wait until the run folder and the "container" exist.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while world.engine.running().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(world.runs_left(), 1, "the run has its folder");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(143));
        assert_eq!(world.runs_left(), 0, "the run folder is removed");
        assert!(world.engine.running().is_empty(), "the container is killed");
        assert!(
            world
                .engine
                .events()
                .iter()
                .any(|e| e.starts_with("killed"))
        );
    })
    .await;
}

#[test]
fn egress_config_mistakes_are_usage_errors_that_say_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let base = "image = \"localhost/tools:latest\"\nengine = \"/nonexistent/bin/docker\"\n";
    for (text, needle) in [
        (
            "network = \"bridge\"\n[commands]\nt = [\"true\"]\n",
            "network \"bridge\" is not accepted: use \"none\"",
        ),
        (
            "[commands.t]\nargv = [\"true\"]\nnetwork = \"host\"\n",
            "commands.t.network: network \"host\"",
        ),
        (
            "[commands.t]\nargv = [\"true\"]\nnetwrk = \"egress\"\n",
            "unknown field `netwrk`",
        ),
        (
            "network = \"egress\"\n[commands]\nt = [\"true\"]\n",
            "no allowed host and no route: set [egress] allow",
        ),
        (
            "network = \"egress\"\n[egress]\nallow = [\"a.example.test\"]\nproxy_port = 80\n[commands]\nt = [\"true\"]\n",
            "proxy_port 80 is below 1024",
        ),
        (
            "[egress]\nallow = [\"a.example.test\"]\nallow_cidrs = [\"10.0.0.0/33\"]\n[commands]\nt = [\"true\"]\n",
            "[egress] allow_cidrs",
        ),
        (
            "[environment]\nHTTPS_PROXY = \"http://10.1.2.3:3128\"\n[commands]\nt = [\"true\"]\n",
            "the proxy variables are agentguard's",
        ),
        ("[commands]\nt = \"true\"\n", "an argv array"),
    ] {
        let path = dir.path().join("agentguard.toml");
        std::fs::write(&path, format!("{base}{text}")).unwrap();
        let out = agentguard(&["run", "--config", path.to_str().unwrap(), "t", "--dry-run"]);
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{text}: {}", stderr(&out));
    }
    let _ = Path::new(".");
}

/// A run flooding its proxy with refused CONNECTs writes a handful of events, not one per
/// refusal; the events still account for every refusal, and `--json` counts them exactly.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_refusals_is_merged_in_the_audit_log_and_counted_exactly() {
    let world = World::start().await;
    let port = world.upstream.addr().port();
    let world = blocking(move || {
        let out = world.run(&["flood", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let value: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(value["stdout"], "refused 3000\n", "{value}");
        assert_eq!(value["egress"]["denied"], 3000, "{value}");
        // Issue 36: grouped by target and reason, counted exactly though the log merged them.
        let mut refused: Vec<(String, String, u64)> = value["egress"]["refused"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["target"].as_str().unwrap().to_owned(),
                    t["reason"].as_str().unwrap().to_owned(),
                    t["count"].as_u64().unwrap(),
                )
            })
            .collect();
        refused.sort();
        assert_eq!(
            refused,
            [
                (
                    format!("10.0.0.1:{port}"),
                    "non_public_address".into(),
                    1000
                ),
                (
                    format!("evil.example.test:{port}"),
                    "domain_not_allowed".into(),
                    1000
                ),
                (
                    "good.example.test:22".into(),
                    "port_not_allowed".into(),
                    1000
                ),
            ],
            "{value}"
        );
        assert!(value["egress"].get("refused_more").is_none());
        // Without --json, one line after the output says what was refused and what to do.
        let out = world.run(&["flood"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("agentguard: the proxy refused 3000 connections: ")
                && said.contains(&format!(
                    "evil.example.test:{port} (domain_not_allowed) x1000"
                ))
                && said.contains("--observe")
                && said.contains("policy suggest"),
            "{said}"
        );
        // At most 20 targets are listed, the rest counted.
        let out = world.run(&["flood_many", "--json"]);
        let value: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(value["egress"]["denied"], 25, "{value}");
        assert_eq!(value["egress"]["refused"].as_array().unwrap().len(), 20);
        assert_eq!(value["egress"]["refused_more"], 5, "{value}");
        let out = world.run(&["flood_many"]);
        assert!(stderr(&out).contains(" and 5 more"), "{}", stderr(&out));
        world
    })
    .await;
    let refusals: Vec<_> = world
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "egress_connect")
        .collect();
    // Two floods of 3,000 to 3 targets, merged per 2 s window, and 2 x 25 single refusals.
    assert!(
        refusals.len() < 160,
        "{} events for 6,050 refusals",
        refusals.len()
    );
    let accounted: u64 = refusals
        .iter()
        .map(|r| r["data"]["repeated"].as_u64().unwrap_or(1))
        .sum();
    assert_eq!(
        accounted,
        3000 * 2 + 25 * 2,
        "every refusal is in an event or its count"
    );
    let verify = agentguard(&[
        "audit",
        "verify",
        world.dir.path().join("audit.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
}

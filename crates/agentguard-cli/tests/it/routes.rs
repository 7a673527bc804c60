//! `[secrets]` and `[routes.NAME]` through `agentguard run` without an engine: the fake
//! engine runs the "container" as a host process with only the variables the run gives it;
//! the relay, the run's proxy, the DNS server, the TLS upstream and curl are real. The
//! secret lives in agentguard's own environment and must appear nowhere else: not in the
//! command's environment or output, `--json`, `--dry-run`, the audit log or the messages.
//! Real containers on every engine and runtime are in the e2e suite.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Command, Output};

use agentguard_test_support::{FakeDns, FakeEngine, TestCa, TlsUpstream, free_port};

use crate::{stderr, stdout};

const UPSTREAM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const SECRET: &str = "cli-route-secret-7f3a9c";
const TOKEN_ENV: &str = "AGENTGUARD_TEST_ROUTE_TOKEN";

struct World {
    dir: tempfile::TempDir,
    _engine: FakeEngine,
    _dns: FakeDns,
    upstream: TlsUpstream,
    config: PathBuf,
}

impl World {
    async fn start(extra: &str) -> World {
        let ca = TestCa::new("cli route test CA");
        let upstream =
            TlsUpstream::start(UPSTREAM, 0, ca.server_config(&["api.example.test"])).await;
        let dns = FakeDns::start().await;
        dns.answer("api.example.test", &[UPSTREAM]);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        let engine = FakeEngine::new();
        let text = format!(
            r#"image = "localhost/tools:latest"
engine = "{engine}"
timeout = 60

[egress]
nameservers = ["{dns}"]
proxy_port = {proxy}

[audit]
path = "audit.jsonl"

[secrets]
api = {{ env = "{TOKEN_ENV}" }}

[routes.api]
upstream = "https://api.example.test:{port}/"
secret = "api"
header = "Authorization"
value = "Bearer {{secret}}"
methods = ["GET"]
paths = ["/echo"]
env = "API_URL"
allow_cidrs = ["127.0.0.2/32"]
ca_file = "ca.pem"

[commands.call]
argv = ["sh", "-c", "curl -sS --max-time 20 \"$API_URL/echo\"; echo; curl -sS --max-time 20 \"$API_URL/other\"; echo; env"]
network = "egress"
routes = ["api"]

[commands.offline]
argv = ["true"]
{extra}"#,
            engine = engine.path().display(),
            dns = dns.addr(),
            proxy = free_port(),
            port = upstream.addr().port(),
        );
        let config = dir.path().join("agentguard.toml");
        std::fs::write(&config, text).unwrap();
        let runs = dir.path().join("runs");
        std::fs::create_dir(&runs).unwrap();
        std::fs::set_permissions(&runs, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        World {
            dir,
            _engine: engine,
            _dns: dns,
            upstream,
            config,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentguard"));
        command
            .args(args)
            .args(["--config", self.config.to_str().unwrap()])
            .env_remove("AGENTGUARD_LOG")
            .env(TOKEN_ENV, SECRET)
            .env("AGENTGUARD_RUN_DIR", self.dir.path().join("runs"));
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn audit_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl")).unwrap_or_default()
    }
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "the secret is in {what}: {text}");
}

async fn blocking<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(body).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_uses_a_route_whose_secret_it_never_sees() {
    let world = World::start("").await;
    let world = blocking(move || {
        let out = world.run(&["run", "call", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        let text = json["stdout"].as_str().unwrap();
        assert!(
            text.contains("Bearer [REDACTED]"),
            "the upstream got it, the command did not: {text}"
        );
        assert!(text.contains("403 path_not_allowed"), "{text}");
        let port = text
            .lines()
            .find_map(|l| l.strip_prefix("API_URL=http://127.0.0.1:"))
            .expect("API_URL in the command's environment");
        assert!(port.ends_with("/api"), "{port}");
        assert!(text.contains("NO_PROXY=127.0.0.1,localhost"), "{text}");
        assert!(
            !text.contains(TOKEN_ENV),
            "agentguard's variable is not passed on: {text}"
        );
        assert_eq!(
            (&json["egress"]["allowed"], &json["egress"]["denied"]),
            (&serde_json::json!(1), &serde_json::json!(1))
        );
        assert_eq!(
            json["egress"]["refused"],
            serde_json::json!([{"target": "route api GET /other", "reason": "path_not_allowed", "count": 1}]),
            "{json}"
        );
        assert_no_secret("the run's output and --json", &stdout(&out));
        assert_no_secret("the diagnostics", &stderr(&out));
        let audit = world.audit_text();
        assert_no_secret("the audit log", &audit);
        let routes: Vec<serde_json::Value> = audit
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e["kind"] == "egress_route")
            .collect();
        let mut reasons: Vec<&str> = routes
            .iter()
            .map(|e| e["reason"].as_str().unwrap())
            .collect();
        reasons.sort();
        assert_eq!(reasons, ["ok", "path_not_allowed"]);
        assert!(routes.iter().all(
                |e| e["subject"]["route"] == "api" && e["subject"]["run"] == json["container"]
            ));
        let log = world.dir.path().join("audit.jsonl");
        let verify = crate::agentguard(&["audit", "verify", log.to_str().unwrap()]);
        assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
        let show = crate::agentguard(&[
            "audit",
            "show",
            log.to_str().unwrap(),
            "--kind",
            "egress_route",
        ]);
        let shown = stdout(&show);
        assert!(
            shown.contains("route=api") && shown.contains("method=GET"),
            "{shown}"
        );
        assert!(shown.contains("status=403"), "{shown}");
        // Verbose diagnostics hold no secret either.
        let out = world.command(&["run", "call", "-vvv"]).output().unwrap();
        assert_no_secret("-vvv diagnostics", &stderr(&out));
        world
    })
    .await;
    let seen = world.upstream.seen();
    assert_eq!(
        seen.len(),
        2,
        "only the allowed path reached the upstream, once per run"
    );
    assert!(
        seen[0]
            .head
            .contains(&format!("authorization: Bearer {SECRET}")),
        "{}",
        seen[0].head
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_shows_the_route_variable_and_never_the_secret() {
    let world = World::start("").await;
    blocking(move || {
        let out = world.run(&["run", "call", "--dry-run"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let argv = stdout(&out);
        assert!(argv.contains("--env API_URL=http://127.0.0.1:"), "{argv}");
        assert!(
            argv.contains("--env NO_PROXY=127.0.0.1,localhost"),
            "{argv}"
        );
        assert_no_secret("--dry-run", &argv);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_secret_refuses_the_run_before_anything_starts() {
    let world = World::start("").await;
    blocking(move || {
        let out = world
            .command(&["run", "call"])
            .env_remove(TOKEN_ENV)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let message = stderr(&out);
        assert!(
            message.contains(TOKEN_ENV) && message.contains("not set"),
            "{message}"
        );
        let out = world
            .command(&["run", "call"])
            .env(TOKEN_ENV, "  ")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("empty"), "{}", stderr(&out));
        assert_eq!(world.upstream.seen().len(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_secret_is_read_from_its_first_line_and_a_readable_file_is_a_warning() {
    let extra = "";
    let world = World::start(extra).await;
    let secret_file = world.dir.path().join("token");
    std::fs::write(&secret_file, format!("{SECRET}\nsecond line\n")).unwrap();
    std::fs::set_permissions(
        &secret_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let text = std::fs::read_to_string(&world.config).unwrap().replace(
        &format!("api = {{ env = \"{TOKEN_ENV}\" }}"),
        "api = { file = \"token\" }",
    );
    std::fs::write(&world.config, text).unwrap();
    let world = blocking(move || {
        let out = world
            .command(&["run", "call"])
            .env_remove(TOKEN_ENV)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("readable by group or others"),
            "{}",
            stderr(&out)
        );
        assert_no_secret("the output", &stdout(&out));
        world
    })
    .await;
    let seen = world.upstream.seen();
    assert!(
        seen[0].head.contains(&format!("Bearer {SECRET}\r\n")),
        "only the first line: {}",
        seen[0].head
    );
}

/// Issue 34, item 8: a FIFO (which would hang every run), a device (which would fill memory)
/// and a first line over 8 KiB are refused, naming the secret, and the run never starts.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_file_that_is_not_a_small_regular_file_is_refused() {
    let world = World::start("").await;
    let fifo = world.dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let long = world.dir.path().join("long");
    std::fs::write(&long, "x".repeat(8 * 1024 + 1)).unwrap();
    let original = std::fs::read_to_string(&world.config).unwrap();
    let world = blocking(move || {
        for (source, want) in [
            (fifo.display().to_string(), "a FIFO, not a regular file"),
            ("/dev/zero".to_owned(), "a device, not a regular file"),
            (long.display().to_string(), "longer than 8192 bytes"),
        ] {
            let text = original.replace(
                &format!("api = {{ env = \"{TOKEN_ENV}\" }}"),
                &format!("api = {{ file = \"{source}\" }}"),
            );
            std::fs::write(&world.config, text).unwrap();
            let out = world
                .command(&["run", "call"])
                .env_remove(TOKEN_ENV)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{source}: {}", stderr(&out));
            assert!(stderr(&out).contains(want), "{source}: {}", stderr(&out));
            assert!(stderr(&out).contains("secret \"api\""), "{}", stderr(&out));
        }
        world
    })
    .await;
    assert_eq!(world.upstream.seen().len(), 0);
}

#[test]
fn route_settings_are_checked_when_the_file_is_loaded() {
    let cases = [
        (
            "[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"nope\"\nheader = \"A\"\nvalue = \"{secret}\"\n",
            "no secret named \"nope\"",
        ),
        (
            "[secrets]\ns = { env = \"A\", file = \"b\" }\n",
            "exactly one of",
        ),
        (
            "[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nheader = \"A\"\nvalue = \"{secret}\"\nscheme = \"basic\"\nuser = \"u\"\n",
            "not both",
        ),
        (
            "[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nscheme = \"digest\"\nuser = \"u\"\n",
            "\"digest\"",
        ),
        (
            "[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nheader = \"A\"\nvalue = \"{secret}\"\nenv = \"HTTPS_PROXY\"\n",
            "proxy variable",
        ),
        (
            "[environment]\nU = \"1\"\n[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nheader = \"A\"\nvalue = \"{secret}\"\nenv = \"U\"\n",
            "also set in [environment]",
        ),
        (
            "[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nheader = \"A\"\nvalue = \"{secret}\"\nsurprise = 1\n",
            "surprise",
        ),
        (
            "[commands.c]\nargv = [\"true\"]\nnetwork = \"egress\"\nroutes = [\"missing\"]\n",
            "no route named \"missing\"",
        ),
        // Issue 34, item 8: names the loader, a shell or a runtime interprets.
        (
            "[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nheader = \"A\"\nvalue = \"{secret}\"\nenv = \"PATH\"\n",
            "read by the loader",
        ),
        (
            "[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nheader = \"A\"\nvalue = \"{secret}\"\nenv = \"LD_PRELOAD\"\n",
            "read by the loader",
        ),
        (
            "[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nheader = \"A\"\nvalue = \"{secret}\"\nenv = \"PYTHONSTARTUP\"\n",
            "read by the loader",
        ),
        (
            "[secrets]\ns = { env = \"A\" }\n[routes.x]\nupstream = \"https://a.example.test/\"\nsecret = \"s\"\nheader = \"A\"\nvalue = \"{secret}\"\nenv = \"home\"\n",
            "read by the loader",
        ),
        (
            "[secrets]\ns = { k8s_secret = \"api-token/token\" }\n",
            "engine = \"kubernetes\"",
        ),
    ];
    for (extra, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let engine = FakeEngine::new();
        let config = dir.path().join("agentguard.toml");
        let text = format!(
            "image = \"localhost/tools:latest\"\nengine = \"{}\"\n[commands]\nt = [\"true\"]\n{extra}",
            engine.path().display()
        );
        std::fs::write(&config, text).unwrap();
        let out = crate::agentguard(&[
            "run",
            "t",
            "--config",
            config.to_str().unwrap(),
            "--dry-run",
        ]);
        assert_eq!(out.status.code(), Some(2), "{extra}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{extra}: {}", stderr(&out));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn routes_on_a_network_none_command_are_refused() {
    let world = World::start("").await;
    let text = std::fs::read_to_string(&world.config).unwrap().replace(
        "[commands.offline]\nargv = [\"true\"]\n",
        "[commands.offline]\nargv = [\"true\"]\nroutes = [\"api\"]\n",
    );
    std::fs::write(&world.config, text).unwrap();
    blocking(move || {
        let out = world.run(&["run", "offline"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("sets routes but its network is \"none\""),
            "{}",
            stderr(&out)
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_descriptions_name_each_route_and_never_its_secret() {
    let world = World::start("").await;
    blocking(move || {
        let out = world.run(&["tools", "--format", "mcp"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let tools: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let call = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "call")
            .expect("the call tool");
        let description = call["description"].as_str().unwrap();
        for needle in [
            "/api, in $API_URL",
            "GET to api.example.test",
            "the paths /echo",
            "credential added by the proxy",
        ] {
            assert!(
                description.contains(needle),
                "{needle:?} missing: {description}"
            );
        }
        assert_no_secret("the tool list", &stdout(&out));
        assert!(!description.contains("Bearer"), "{description}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_says_whether_each_secret_is_present_and_never_its_value() {
    let world = World::start("").await;
    blocking(move || {
        let doctor = |token: Option<&str>| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_agentguard"));
            command
                .arg("doctor")
                .env("AGENTGUARD_CONFIG", &world.config)
                .env_remove("AGENTGUARD_LOG")
                .env_remove(TOKEN_ENV);
            if let Some(token) = token {
                command.env(TOKEN_ENV, token);
            }
            let out = command.output().unwrap();
            format!("{}{}", stdout(&out), stderr(&out))
        };
        let present = doctor(Some(SECRET));
        assert!(
            present.contains(&format!(
                "OK   secret \"api\" (the variable {TOKEN_ENV}) is present"
            )),
            "{present}"
        );
        assert_no_secret("doctor", &present);
        let missing = doctor(None);
        assert!(
            missing.contains(&format!(
                "FAIL secret \"api\": the variable {TOKEN_ENV} is not set"
            )),
            "{missing}"
        );
    })
    .await;
}

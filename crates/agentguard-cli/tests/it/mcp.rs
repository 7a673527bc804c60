//! `agentguard mcp` on the wire, without any MCP library: literal JSON-RPC lines in, every
//! stdout line parsed as JSON-RPC and compared (container names and durations normalized) with
//! golden files, in both protocol eras; progress only for a call with a token; the end of
//! stdin and SIGTERM end the server and its runs; a config mistake exits before serving.
//! And `agentguard tools` in each format. Regenerate the goldens with `UPDATE_GOLDEN=1`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use agentguard_test_support::FakeEngine;
use serde_json::{Value, json};

use crate::{agentguard, stderr, stdout};

pub(crate) fn config(dir: &Path, engine: &FakeEngine) -> PathBuf {
    let path = dir.join("agentguard.toml");
    std::fs::write(
        &path,
        format!(
            "image = \"localhost/tools:latest\"\nengine = \"{}\"\ntimeout = 60\n\n[commands]\nok = [\"echo\", \"all good\"]\nsecond = [\"sleep\", \"1\"]\nsleepy = [\"sleep\", \"30\"]\n\n[commands.three]\nargv = [\"sh\", \"-c\", \"echo failing >&2; exit 3\"]\ndescription = \"Exit with status three\"\n\n[audit]\npath = \"audit.jsonl\"\n",
            engine.path().display()
        ),
    )
    .unwrap();
    path
}

pub(crate) struct Server {
    pub(crate) child: Child,
    lines: BufReader<ChildStdout>,
}

impl Server {
    fn start(config: &Path) -> Server {
        Server::start_with(config, &[])
    }

    /// The server of `config`, with the environment variables `envs` besides.
    pub(crate) fn start_with(config: &Path, envs: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(["mcp", "--config"])
            .arg(config)
            .envs(envs.iter().copied())
            .env("AGENTGUARD_MCP_PROGRESS_MS", "100")
            .env_remove("AGENTGUARD_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap());
        Server { child, lines }
    }

    pub(crate) fn send(&mut self, message: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next stdout line, which must be one JSON-RPC message.
    pub(crate) fn next(&mut self) -> Value {
        let mut line = String::new();
        self.lines.read_line(&mut line).unwrap();
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
        assert_eq!(value["jsonrpc"], "2.0", "{line}");
        value
    }

    /// Sends a request and returns its response, and the notifications that came first.
    pub(crate) fn request(&mut self, message: Value) -> (Value, Vec<Value>) {
        let id = message["id"].clone();
        self.send(&message);
        let mut notes = Vec::new();
        loop {
            let value = self.next();
            if value["id"] == id {
                return (value, notes);
            }
            notes.push(value);
        }
    }
}

/// Container names, durations and the version vary; the rest must not.
fn normalize(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("agentguard-") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + "agentguard-".len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .unwrap_or(tail.len());
        if end > 0 {
            out.push_str("agentguard-CONTAINER");
        } else {
            out.push_str("agentguard-");
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    let mut value: Value = serde_json::from_str(&out).unwrap();
    scrub(&mut value);
    value.to_string()
}

fn scrub(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "duration_ms" {
                    *v = json!(0);
                } else if key == "version" && v.is_string() {
                    *v = json!("VERSION");
                } else if key == "text" && v.is_string() {
                    // The text block is the structured content, serialized: scrub it too.
                    let mut inner: Value = serde_json::from_str(v.as_str().unwrap()).unwrap();
                    scrub(&mut inner);
                    *v = json!(inner.to_string());
                } else {
                    scrub(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

fn check_golden(file: &str, lines: &[Value]) {
    let text: String = lines
        .iter()
        .map(|l| normalize(&l.to_string()) + "\n")
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    for (got, want) in text.lines().zip(want.lines()) {
        assert_eq!(got, want, "differs from {file}");
    }
    assert_eq!(text.lines().count(), want.lines().count(), "{file}");
}

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"wire","version":"2"}}"#;

/// The same conversation in either era: list, a passing call, a failing call, refused
/// arguments, an unknown tool.
fn conversation(server: &mut Server, meta: Option<&Value>) -> Vec<Value> {
    let with_meta = |mut params: Value| {
        if let Some(meta) = meta {
            params["_meta"] = meta.clone();
        }
        params
    };
    let mut responses = Vec::new();
    for (id, method, params) in [
        (2, "tools/list", json!({})),
        (3, "tools/call", json!({"name": "ok", "arguments": {}})),
        (4, "tools/call", json!({"name": "three"})),
        (
            5,
            "tools/call",
            json!({"name": "ok", "arguments": {"argv": ["rm", "-rf", "/"]}}),
        ),
        (6, "tools/call", json!({"name": "rm"})),
    ] {
        let (response, notes) = server.request(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": with_meta(params)}),
        );
        assert!(notes.is_empty(), "no progress without a token: {notes:?}");
        responses.push(response);
    }
    responses
}

#[test]
fn the_legacy_handshake_lists_and_calls_the_tools_as_golden() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let mut server = Server::start(&config(dir.path(), &engine));
    let (init, _) = server.request(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "wire", "version": "1"}}}));
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut lines = vec![init];
    lines.extend(conversation(&mut server, None));
    check_golden("mcp-legacy.jsonl", &lines);
    // The end of stdin ends the server with 0.
    drop(server.child.stdin.take());
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(audit.contains("\"mcp_client\":\"wire/1\""), "{audit}");
}

#[test]
fn the_stateless_revision_lists_and_calls_the_tools_as_golden() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let mut server = Server::start(&config(dir.path(), &engine));
    let meta: Value = serde_json::from_str(META).unwrap();
    let (discover, _) = server.request(
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}),
    );
    let mut lines = vec![discover];
    lines.extend(conversation(&mut server, Some(&meta)));
    check_golden("mcp-modern.jsonl", &lines);
    drop(server.child.stdin.take());
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_call_with_a_progress_token_gets_progress_and_sigterm_kills_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let mut server = Server::start(&config(dir.path(), &engine));
    server.request(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "wire", "version": "1"}}}));
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let (result, notes) = server.request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "second", "_meta": {"progressToken": "p1"}}}));
    assert_eq!(result["result"]["structuredContent"]["status"], "exited");
    assert!(
        !notes.is_empty(),
        "progress for a 1 s run reported every 100 ms"
    );
    for note in &notes {
        assert_eq!(note["method"], "notifications/progress");
        assert_eq!(note["params"]["progressToken"], "p1");
        assert_eq!(note["params"]["total"], 60.0);
    }
    // A long run, then SIGTERM: the container is killed and the server exits 0.
    server.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "sleepy"}}),
    );
    for _ in 0..500 {
        if !engine.running().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!engine.running().is_empty(), "the run started");
    Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    let answer = server.next();
    assert_eq!(answer["id"], 3);
    assert_eq!(
        answer["result"]["structuredContent"]["reason"],
        "shutting_down"
    );
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    assert!(engine.running().is_empty(), "no container is left");
    assert!(engine.events().iter().any(|e| e.starts_with("killed")));
}

#[test]
fn a_config_mistake_exits_before_anything_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentguard.toml");
    for (text, needle) in [
        (
            "[commands]\n\"Run-Tests\" = [\"true\"]\n",
            "cannot be an MCP tool",
        ),
        (
            "[commands]\nt = [\"true\"]\n[fetch]\nallow = []\n",
            "[fetch] allow",
        ),
        (
            "[commands]\nfetch = [\"true\"]\n[fetch]\nallow = [\"docs.example.test\"]\n",
            "rename the command",
        ),
    ] {
        std::fs::write(
            &path,
            format!("image = \"localhost/tools:latest\"\nengine = \"/nonexistent/docker\"\n{text}"),
        )
        .unwrap();
        let out = agentguard(&["mcp", "--config", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{text}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "nothing on stdout");
    }
}

#[test]
fn tools_prints_the_same_definitions_in_each_format() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine);
    let mut all = Vec::new();
    for format in ["mcp", "openai", "anthropic"] {
        let out = agentguard(&[
            "tools",
            "--config",
            cfg.to_str().unwrap(),
            "--format",
            format,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let value: Value = serde_json::from_str(&stdout(&out)).unwrap();
        all.push(value);
    }
    check_golden("tools.jsonl", &all);
    // OpenAI strict: every object closed, every property required, names fit.
    for function in all[1].as_array().unwrap() {
        assert_eq!(function["strict"], true);
        assert_eq!(function["parameters"]["additionalProperties"], false);
        assert!(function["parameters"]["required"].is_array());
        let name = function["name"].as_str().unwrap();
        assert!(
            name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }
}

/// An `initialize` whose client name and version are `name` and `version`.
pub(crate) fn initialize(server: &mut Server, name: &str, version: &str) {
    server.request(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": name, "version": version}}}));
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
}

/// The audit log's records of `kind`, after checking that the log verifies.
pub(crate) fn audited(dir: &Path, kind: &str) -> Vec<Value> {
    let path = dir.join("audit.jsonl");
    let verify = agentguard(&["audit", "verify", path.to_str().unwrap()]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == kind)
        .collect()
}

#[test]
fn a_client_sending_huge_names_and_ids_is_served_and_capped_in_its_event() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    // A command may be called `fetch` when no [fetch] table is configured: it is callable.
    let config = dir.path().join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"localhost/tools:latest\"\nengine = \"{}\"\n[commands]\nfetch = [\"echo\", \"a command called fetch\"]\n[audit]\npath = \"audit.jsonl\"\n",
            engine.path().display()
        ),
    )
    .unwrap();
    let mut server = Server::start(&config);
    let huge = "n".repeat(70_000);
    initialize(&mut server, &huge, &"v".repeat(70_000));
    let id = "i".repeat(70_000);
    let (listed, _) = server.request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    assert_eq!(listed["result"]["tools"][0]["name"], "fetch", "{listed}");
    let (answer, _) = server.request(
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "fetch"}}),
    );
    let result = &answer["result"]["structuredContent"];
    assert_eq!(result["status"], "exited", "{answer}");
    assert_eq!(result["stdout"], "a command called fetch\n", "{answer}");
    drop(server.child.stdin.take());
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    let calls = audited(dir.path(), "mcp_call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    let client = calls[0]["subject"]["mcp_client"].as_str().unwrap();
    let request_id = calls[0]["data"]["request_id"].as_str().unwrap();
    for (text, whole) in [(client, 140_001), (request_id, 70_000)] {
        assert!(text.len() < 400, "capped: {} bytes", text.len());
        assert!(
            text.contains(&format!("...[{whole} bytes, sha256 ")),
            "{text}"
        );
    }
    // The run's own event names the client too (issue 37), capped the same way.
    let runs = audited(dir.path(), "container_run");
    assert_eq!(runs.len(), 1);
    let invoker_client = runs[0]["data"]["invoker"]["client"].as_str().unwrap();
    assert_eq!(invoker_client, client, "{}", runs[0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fetch_over_mcp_writes_the_fetch_event_of_agentguard_fetch() {
    use agentguard_test_support::{FakeDns, TestCa, TlsUpstream};
    let good = std::net::IpAddr::from([127, 0, 0, 2]);
    let dns = FakeDns::start().await;
    let ca = TestCa::new("mcp fetch CA");
    let upstream = TlsUpstream::start(good, 0, ca.server_config(&["pkgs.example.test"])).await;
    dns.answer("pkgs.example.test", &[good]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
    let engine = FakeEngine::new();
    let port = upstream.addr().port();
    let config = dir.path().join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"localhost/tools:latest\"\nengine = \"{}\"\n[commands]\nok = [\"true\"]\n[fetch]\nallow = [\"pkgs.example.test\"]\nallow_ports = [{port}]\nallow_cidrs = [\"127.0.0.2/32\"]\nnameservers = [\"{}\"]\nca_file = \"ca.pem\"\n[audit]\npath = \"audit.jsonl\"\n",
            engine.path().display(),
            dns.addr()
        ),
    )
    .unwrap();
    let url = format!("https://pkgs.example.test:{port}/simple/?carried=data-in-a-query");
    let dir_path = dir.path().to_owned();
    let answer = tokio::task::spawn_blocking(move || {
        let mut server = Server::start(&config);
        initialize(&mut server, "wire", "1");
        let (answer, _) = server.request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fetch", "arguments": {"url": url}}}));
        drop(server.child.stdin.take());
        assert_eq!(server.child.wait().unwrap().code(), Some(0));
        answer
    })
    .await
    .unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["status"], "fetched",
        "{answer}"
    );
    let fetches = audited(&dir_path, "fetch");
    assert_eq!(fetches.len(), 1, "{fetches:?}");
    let fetch = &fetches[0];
    assert_eq!(fetch["decision"], "allow");
    assert!(
        fetch["subject"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/simple/?carried=data-in-a-query"),
        "{fetch}"
    );
    assert_eq!(fetch["data"]["status"], 200, "{fetch}");
    assert_eq!(
        fetch["data"]["dialed"],
        format!("127.0.0.2:{port}"),
        "{fetch}"
    );
    assert!(fetch["data"]["bytes"].is_number(), "{fetch}");
    let call = &audited(&dir_path, "mcp_call")[0];
    assert!(
        fetch["seq"].as_u64() < call["seq"].as_u64(),
        "recorded before the result"
    );
}

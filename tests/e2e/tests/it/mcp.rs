//! `agentguard mcp` on real engines, through an independent client: the Python SDK (`mcp`
//! from PyPI, pinned, in the venv `cargo xtask setup` makes) in the legacy and the stateless
//! era calls the pytest example's tool against the debootstrap image, and a `network =
//! "egress"` tool that installs a package through its proxy.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::combo_or_skip;
use crate::egress::{ALLOWED, World};

/// The client script.
const CLIENT: &str = include_str!("../../mcp_client.py");
/// The venv's python, set by `cargo xtask e2e`.
const ENV_PYTHON: &str = "AGENTGUARD_E2E_MCP_PYTHON";

/// Runs the client in `mode` against `config` and returns what it saw.
fn client(world: &World, config: &std::path::Path, mode: &str, tool: &str) -> Result<Value> {
    client_with(world, config, mode, tool, None)
}

/// [`client`], calling `tool` once per object of `calls` when given (what it saw is then a
/// `calls` list, with the tool's input schema).
pub(crate) fn client_with(
    world: &World,
    config: &std::path::Path,
    mode: &str,
    tool: &str,
    calls: Option<&Value>,
) -> Result<Value> {
    let python = std::env::var(ENV_PYTHON)
        .with_context(|| format!("{ENV_PYTHON} is not set (run `cargo xtask e2e`)"))?;
    let script = world.dir.0.with_extension("mcp_client.py");
    std::fs::write(&script, CLIENT)?;
    let out = Command::new(python)
        .arg(&script)
        .arg(&world.combo.binary)
        .arg(config)
        .args([mode, tool])
        .args(calls.map(Value::to_string))
        .output()
        .context("running the Python MCP client")?;
    let _ = std::fs::remove_file(&script);
    ensure!(
        out.status.success(),
        "the Python client failed ({mode}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .with_context(|| format!("the client's line: {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_mcp_client_sees_the_pytest_example_in_both_eras() -> Result<()> {
    let combo = combo_or_skip!("the_python_mcp_client_sees_the_pytest_example_in_both_eras");
    let world = World::start(combo.clone(), "mcp-pytest").await?;
    std::fs::write(
        world.dir.join("test_example.py"),
        "def test_passes():\n    assert 1 + 1 == 2\n\n\ndef test_fails():\n    assert 1 + 1 == 3\n",
    )?;
    let config = world.config(
        &combo.pytest_image,
        "timeout = 120\n\n[commands.run_tests]\nargv = [\"python3\", \"-m\", \"pytest\", \"-q\", \"-p\", \"no:cacheprovider\"]\ndescription = \"Run the test suite\"\nnetwork = \"none\"\n",
    )?;
    for mode in ["legacy", "2026-07-28"] {
        let seen = tokio::task::block_in_place(|| client(&world, &config, mode, "run_tests"))?;
        let result = &seen["structured"];
        let stdout = result["stdout"].as_str().unwrap_or_default();
        println!(
            "{}: over MCP ({mode}), pytest in the container said: {}",
            combo.label(),
            stdout.lines().last().unwrap_or_default()
        );
        ensure!(
            seen["tools"] == serde_json::json!(["run_tests"])
                && seen["is_error"] == false
                && result["status"] == "exited"
                && result["exit_code"] == 1
                && stdout.contains("1 failed, 1 passed")
                && seen["text"]
                    .as_str()
                    .and_then(|t| serde_json::from_str::<Value>(t).ok())
                    .as_ref()
                    == Some(result),
            "{mode}: {seen}"
        );
    }
    let calls = world
        .audit()?
        .into_iter()
        .filter(|e| e["kind"] == "mcp_call")
        .count();
    ensure!(calls == 2, "two mcp_call events, got {calls}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_egress_tool_installs_through_its_proxy_over_mcp() -> Result<()> {
    let combo = combo_or_skip!("an_egress_tool_installs_through_its_proxy_over_mcp");
    let world = World::start(combo.clone(), "mcp-pip").await?;
    let port = world.upstream.addr().port();
    let config = world.config(
        &combo.pytest_image,
        &format!(
            "workspace_mode = \"rw\"\ntimeout = 180\n\n[commands.install]\nargv = [\"python3\", \"-m\", \"pip\", \"install\", \"--no-cache-dir\", \"--disable-pip-version-check\", \"--target\", \"/workspace/.deps\", \"--index-url\", \"https://{ALLOWED}:{port}/simple/\", \"--cert\", \"/workspace/ca.pem\", \"agprobe\"]\n"
        ),
    )?;
    let seen = tokio::task::block_in_place(|| client(&world, &config, "auto", "install"))?;
    let result = &seen["structured"];
    ensure!(
        seen["is_error"] == false
            && result["exit_code"] == 0
            && result["egress"]["allowed"] == 2
            && world.dir.join(".deps/agprobe/__init__.py").exists(),
        "{seen}"
    );
    Ok(())
}

/// Inside the container: hold 400 silent connections to the relay (each takes a slot of the
/// process's connection budget while the proxy waits for its head), and send refused CONNECTs
/// without end.
const FLOOD: &str = "import os, socket, time\nport = int(os.environ['HTTPS_PROXY'].rsplit(':', 1)[1])\nheld = []\nwhile True:\n    try:\n        s = socket.create_connection(('127.0.0.1', port), timeout=2)\n        if len(held) < 400:\n            held.append(s)\n            continue\n        s.sendall(b'CONNECT off.example.test:443 HTTP/1.1\\r\\n\\r\\n')\n        s.recv(200)\n        s.close()\n    except OSError:\n        time.sleep(0.01)\n";

/// One `agentguard mcp` process at a pinned descriptor limit (1100: a budget of 172 connections
/// for all its proxies), two tools flooding their proxies until their timeout, and a third
/// call meanwhile: the third runs (never `engine_missing` or `out_of_descriptors`), the floods
/// end `timed_out` only with their containers gone, and their refusals reach the audit log
/// merged, each one counted.
#[tokio::test(flavor = "multi_thread")]
async fn two_flooding_calls_never_make_a_third_fail_and_their_refusals_are_merged() -> Result<()> {
    let combo =
        combo_or_skip!("two_flooding_calls_never_make_a_third_fail_and_their_refusals_are_merged");
    let world = World::start(combo.clone(), "mcp-flood").await?;
    let flood = FLOOD
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let config = world.config(
        &combo.pytest_image,
        &format!(
            "timeout = 12\n\n[commands.flood_a]\nargv = [\"python3\", \"-c\", \"{flood}\"]\n\n[commands.flood_b]\nargv = [\"python3\", \"-c\", \"{flood}\"]\n\n[commands.offline]\nargv = [\"python3\", \"-c\", \"print('offline ok')\"]\nnetwork = \"none\"\n"
        ),
    )?;
    let python = std::env::var(ENV_PYTHON)
        .with_context(|| format!("{ENV_PYTHON} is not set (run `cargo xtask e2e`)"))?;
    let script = world.dir.0.with_extension("mcp_flood.py");
    std::fs::write(&script, include_str!("../../mcp_flood.py"))?;
    let out = tokio::task::block_in_place(|| {
        Command::new(python)
            .arg(&script)
            .arg("1100")
            .arg(&combo.binary)
            .arg(&config)
            .output()
    })?;
    let _ = std::fs::remove_file(&script);
    ensure!(
        out.status.success(),
        "the flood client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let seen: Value = serde_json::from_str(text.lines().last().unwrap_or_default())
        .with_context(|| format!("the client's line: {text}"))?;
    let offline = &seen["offline"]["structured"];
    ensure!(
        seen["offline"]["is_error"] == false
            && offline["exit_code"] == 0
            && offline["stdout"] == "offline ok\n",
        "the third call ran: {seen}"
    );
    let mut denied = 0;
    for flood in ["flood_a", "flood_b"] {
        let result = &seen[flood]["structured"];
        ensure!(result["status"] == "timed_out", "{flood}: {result}");
        denied += result["egress"]["denied"].as_u64().unwrap_or(0);
    }
    let audit = world.audit()?;
    let refusals: Vec<&Value> = audit
        .iter()
        .filter(|e| e["kind"] == "egress_connect" && e["decision"] != "allow")
        .collect();
    let accounted: u64 = refusals
        .iter()
        .map(|e| e["data"]["repeated"].as_u64().unwrap_or(1))
        .sum();
    println!(
        "{}: two floods refused {denied} CONNECTs in {} events; the third call ran",
        combo.label(),
        refusals.len()
    );
    ensure!(denied > 100, "the floods were refused: {denied}");
    ensure!(
        accounted == denied,
        "every refusal is in an event or its count: {accounted} of {denied}"
    );
    ensure!(refusals.len() < 300, "merged: {} events", refusals.len());
    let runs = audit
        .iter()
        .filter(|e| e["kind"] == "container_run")
        .count();
    let calls = audit.iter().filter(|e| e["kind"] == "mcp_call").count();
    ensure!(
        (runs, calls) == (3, 3),
        "a container_run and an mcp_call per call: {runs}, {calls}"
    );
    Ok(())
}

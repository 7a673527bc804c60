//! Issue 35 against the binary: per-command values override the top level's for that command
//! only (`--dry-run`, the fake engine's argv, MCP annotations), errors name
//! `commands.NAME.KEY`, `writable` folders are mounted read-write, `hidden` paths masked by an
//! empty file or folder found when the run starts, more than 4096 matches refuse the run.

use std::fs;
use std::path::Path;

use agentguard_test_support::FakeEngine;
use serde_json::Value;

use crate::{agentguard, stderr, stdout};

/// A workspace owned by an ordinary user (a writable one must be, when agentguard is root).
fn workspace(dir: &Path) {
    for folder in [
        "ws/build",
        "ws/.pytest_cache",
        "ws/secrets",
        "ws/a/b",
        "ws/src",
    ] {
        fs::create_dir_all(dir.join(folder)).unwrap();
    }
    for file in [
        "ws/.env",
        "ws/a/b/.env.local",
        "ws/key.pem",
        "ws/secrets/token",
        "ws/src/main.py",
    ] {
        fs::write(dir.join(file), "secret").unwrap();
    }
    std::os::unix::fs::symlink("/etc/hostname", dir.join("ws/src/.env")).unwrap();
    let _ = std::os::unix::fs::chown(dir.join("ws"), Some(1000), Some(1000));
}

fn config(dir: &Path, engine: &str, extra: &str) -> String {
    workspace(dir);
    let path = dir.join("agentguard.toml");
    fs::write(
        &path,
        format!(
            r#"image = "localhost/tools:latest"
engine = "{engine}"
workspace = "ws"
timeout = 60
hidden = [".env", "**/.env*", "**/*.pem", "secrets/"]

[commands.tests]
argv = ["true"]
writable = [".pytest_cache"]

[commands.install]
argv = ["true"]
writable = ["build"]
timeout = 900
memory = "1g"
cpus = "0.5"
pids = 256
tmpfs_size = "128m"
max_output_bytes = 1048576
hidden = ["src/"]

[commands.install.environment]
PIP_NO_INPUT = "1"
{extra}"#
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn each_command_runs_with_its_own_values() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "/nonexistent/bin/docker", "");
    let ws = dir.path().join("ws").canonicalize().unwrap();
    let dry = |name: &str| {
        let out = agentguard(&["run", "--config", &cfg, name, "--dry-run"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    let install = dry("install");
    let tests = dry("tests");
    for needle in [
        "--memory 1g --memory-swap 1g --cpus 0.5 --pids-limit 256",
        "size=128m,",
        "--env PIP_NO_INPUT=1",
        &format!("source={}/build,target=/workspace/build ", ws.display()),
        "target=/workspace/src,readonly",
    ] {
        assert!(
            install.contains(needle),
            "{needle:?} missing from {install}"
        );
    }
    for needle in [
        "--memory 512m --memory-swap 512m --cpus 1 --pids-limit 128",
        &format!(
            "source={}/.pytest_cache,target=/workspace/.pytest_cache ",
            ws.display()
        ),
        "/empty,target=/workspace/.env,readonly",
        "/empty,target=/workspace/a/b/.env.local,readonly",
        "/empty,target=/workspace/key.pem,readonly",
        "/empty.d,target=/workspace/secrets,readonly",
        "/empty,target=/workspace/src/.env,readonly",
    ] {
        assert!(tests.contains(needle), "{needle:?} missing from {tests}");
    }
    assert!(
        !tests.contains("PIP_NO_INPUT") && !tests.contains("/workspace/build"),
        "{tests}"
    );
    assert!(
        !tests.contains("target=/workspace/src,"),
        "install's own hidden: {tests}"
    );
}

#[test]
fn a_run_masks_what_matches_at_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine.path().display().to_string(), "");
    // Made after the config was written: found at the run's start.
    fs::write(dir.path().join("ws/late.pem"), "x").unwrap();
    let runs = dir.path().join("runs");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["run", "--config", &cfg, "tests", "-v"])
        .env_remove("AGENTGUARD_LOG")
        .env("AGENTGUARD_RUN_DIR", &runs)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let call = engine
        .calls()
        .into_iter()
        .find(|c| c.starts_with("run "))
        .expect("a run");
    assert!(
        call.contains("target=/workspace/late.pem,readonly"),
        "{call}"
    );
    assert!(
        stderr(&out).contains("hidden workspace paths masked"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("late.pem"),
        "-v lists them: {}",
        stderr(&out)
    );
    // The run's own folder with the empty file and folder was used, and is gone.
    assert!(
        call.contains(&format!("source={}/agentguard-", runs.display())),
        "{call}"
    );
    assert!(
        fs::read_dir(&runs).unwrap().next().is_none(),
        "nothing is left behind"
    );
}

#[test]
fn more_matches_than_the_limit_refuse_the_run_naming_the_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine.path().display().to_string(), "");
    fs::create_dir_all(dir.path().join("ws/logs")).unwrap();
    for i in 0..=4096 {
        fs::write(dir.path().join(format!("ws/logs/{i}.pem")), "").unwrap();
    }
    let out = agentguard(&["run", "--config", &cfg, "tests"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("\"**/*.pem\" matches more than 4096"),
        "{}",
        stderr(&out)
    );
    assert!(
        !engine.calls().iter().any(|c| c.starts_with("run ")),
        "nothing started"
    );
}

#[test]
fn per_command_mistakes_name_the_key_at_load() {
    for (extra, want) in [
        (
            "[commands.x]\nargv = [\"true\"]\ntimeout = 0\n",
            "`commands.x.timeout`",
        ),
        (
            "[commands.x]\nargv = [\"true\"]\nmemory = \"lots\"\n",
            "`commands.x.memory`",
        ),
        (
            "[commands.x]\nargv = [\"true\"]\ncpus = \"999\"\n",
            "`commands.x.cpus`",
        ),
        (
            "[commands.x]\nargv = [\"true\"]\nworkspace_mode = \"rwx\"\n",
            "`commands.x.workspace_mode`",
        ),
        (
            "[commands.x]\nargv = [\"true\"]\nwritable = [\"../out\"]\n",
            "`commands.x.writable`",
        ),
        (
            "[commands.x]\nargv = [\"true\"]\nwritable = [\"src/main.py\"]\n",
            "not a folder",
        ),
        (
            "[commands.x]\nargv = [\"true\"]\nwritable = [\"build/sub\"]\n",
            "cannot be read",
        ),
        (
            "[commands.x]\nargv = [\"true\"]\nworkspace_mode = \"rw\"\n",
            "x has workspace_mode = \"rw\"",
        ),
        ("[commands.x]\nargv = [\"true\"]\ntimeuot = 3\n", "timeuot"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), "/nonexistent/bin/docker", extra);
        let out = agentguard(&["run", "--config", &cfg, "tests", "--dry-run"]);
        assert_eq!(out.status.code(), Some(2), "{extra}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{extra}: {}", stderr(&out));
    }
}

#[test]
fn tools_are_annotated_with_each_commands_own_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "/nonexistent/bin/docker", "");
    let out = agentguard(&["tools", "--config", &cfg, "--format", "mcp"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tools: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let tool = |name: &str| {
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap()
    };
    let install = tool("install");
    assert!(
        install["description"]
            .as_str()
            .unwrap()
            .contains("900 s timeout"),
        "{install}"
    );
    assert!(
        install["description"]
            .as_str()
            .unwrap()
            .contains("writable: build"),
        "{install}"
    );
    assert_eq!(install["annotations"]["destructiveHint"], true);
    // Only a writable workspace or writable paths make a tool destructive.
    let dir2 = tempfile::tempdir().unwrap();
    let cfg2 = config(
        dir2.path(),
        "/nonexistent/bin/docker",
        "[commands.look]\nargv = [\"ls\"]\n",
    );
    let out = agentguard(&["tools", "--config", &cfg2, "--format", "mcp"]);
    let tools: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let look = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "look")
        .cloned()
        .unwrap();
    assert_eq!(look["annotations"]["readOnlyHint"], true, "{look}");
    assert_eq!(look["annotations"]["destructiveHint"], false, "{look}");
}

/// Issue 35, item 4: a `glob` on a `path` param; the value must match it (`not_matched`),
/// and the tool's schema lists what matches now: `enum` up to 256, `examples` past it.
#[test]
fn a_glob_param_lists_its_matches_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let glob = "[commands.test_file]\nargv = [\"true\", \"{path}\"]\n[commands.test_file.params.path]\ntype = \"path\"\nunder = \"tests\"\nglob = \"tests/**/test_*.py\"\nkind = \"file\"\nmust_exist = true\n";
    let cfg = config(dir.path(), &engine.path().display().to_string(), glob);
    let tests = dir.path().join("ws/tests");
    fs::create_dir_all(tests.join("unit")).unwrap();
    for file in [
        "test_a.py",
        "helpers.py",
        "unit/test_b.py",
        "unit/conftest.py",
    ] {
        fs::write(tests.join(file), "").unwrap();
    }
    std::os::unix::fs::symlink("/etc/passwd", tests.join("test_link.py")).unwrap();
    let schema = |cfg: &str| {
        let out = agentguard(&["tools", "--config", cfg, "--format", "mcp"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let tools: Value = serde_json::from_str(&stdout(&out)).unwrap();
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "test_file")
            .unwrap()["inputSchema"]["properties"]["path"]
            .clone()
    };
    let path = schema(&cfg);
    assert_eq!(
        path["enum"],
        serde_json::json!(["tests/test_a.py", "tests/unit/test_b.py"]),
        "no link, no helper: {path}"
    );
    assert!(
        path["description"]
            .as_str()
            .unwrap()
            .contains("tests/**/test_*.py"),
        "{path}"
    );
    let run = |value: &str| {
        agentguard(&[
            "run",
            "--config",
            &cfg,
            "test_file",
            &format!("path={value}"),
        ])
    };
    assert_eq!(run("tests/unit/test_b.py").status.code(), Some(0));
    let outside = run("tests/helpers.py");
    assert_eq!(outside.status.code(), Some(2), "{}", stderr(&outside));
    assert!(
        stderr(&outside).contains("not_matched"),
        "{}",
        stderr(&outside)
    );
    // Past 256 matches: the first 20 as examples, the description says so.
    for i in 0..300 {
        fs::write(tests.join(format!("test_{i:03}.py")), "").unwrap();
    }
    let path = schema(&cfg);
    assert!(path.get("enum").is_none(), "{path}");
    assert_eq!(path["examples"].as_array().unwrap().len(), 20);
    assert!(
        path["description"]
            .as_str()
            .unwrap()
            .contains("302 paths match now"),
        "{path}"
    );
}

/// `tools/list` lists a glob's matches as they are at each call, not at the server's start.
#[test]
fn tools_list_lists_the_matches_of_the_moment() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let glob = "[commands.test_file]\nargv = [\"true\", \"{path}\"]\n[commands.test_file.params.path]\ntype = \"path\"\nglob = \"tests/test_*.py\"\n";
    let cfg = config(dir.path(), &engine.path().display().to_string(), glob);
    fs::create_dir_all(dir.path().join("ws/tests")).unwrap();
    fs::write(dir.path().join("ws/tests/test_a.py"), "").unwrap();
    let mut server = crate::mcp::Server::start_with(Path::new(&cfg), &[]);
    crate::mcp::initialize(&mut server, "wire", "1");
    let mut listed = |id: u64| {
        let (answer, _) =
            server.request(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        answer["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "test_file")
            .unwrap()["inputSchema"]["properties"]["path"]["enum"]
            .clone()
    };
    assert_eq!(listed(2), serde_json::json!(["tests/test_a.py"]));
    fs::write(dir.path().join("ws/tests/test_b.py"), "").unwrap();
    assert_eq!(
        listed(3),
        serde_json::json!(["tests/test_a.py", "tests/test_b.py"])
    );
}

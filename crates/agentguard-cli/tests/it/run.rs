//! `agentguard run` without an engine: the config file, `--dry-run`, and refusals that must
//! happen before any engine is started. (Runs on real engines are in `cargo xtask e2e`.)

use std::fs;
use std::path::Path;

use crate::{agentguard, stderr, stdout};

const BASE: &str = r#"image = "localhost/tools:latest"
engine = "/nonexistent/bin/docker"
workspace = "ws"

[environment]
CI = "1"

[commands]
run_tests = ["python3", "-m", "pytest", "-q"]
"#;

fn config(dir: &Path, text: &str) -> String {
    fs::create_dir_all(dir.join("ws")).unwrap();
    let path = dir.join("agentguard.toml");
    fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn dry_run_prints_the_hardened_argv_with_paths_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), BASE);
    let out = agentguard(&["run", "--config", &cfg, "run_tests", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let argv = stdout(&out);
    let ws = dir.path().join("ws").canonicalize().unwrap();
    for needle in [
        "/nonexistent/bin/docker run --rm --name agentguard-",
        "--network none --read-only",
        "--cap-drop ALL --security-opt no-new-privileges --user 65534:65534",
        "--memory 512m --memory-swap 512m --cpus 1 --pids-limit 128",
        &format!(
            "--mount type=bind,source={},target=/workspace,readonly",
            ws.display()
        ),
        "--env CI=1 --mount type=bind,source=",
        "/relay,target=/run/agentguard/relay,readonly --entrypoint /run/agentguard/relay localhost/tools:latest --receipt 65534:65534 -- python3 -m pytest -q",
    ] {
        assert!(argv.contains(needle), "{needle:?} missing from {argv}");
    }
    assert_eq!(argv.lines().count(), 1);
    // The relay is the container's init: no engine init behind it.
    assert!(!argv.contains("--init"), "{argv}");
}

#[test]
fn a_name_off_the_allowlist_exits_123_without_touching_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), BASE);
    for args in [
        &["run", "--config", &cfg, "rm -rf /", "--dry-run"][..],
        &["run", "--config", &cfg, "RUN_TESTS"],
    ] {
        let out = agentguard(args);
        assert_eq!(out.status.code(), Some(123), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("command_not_allowed"),
            "{}",
            stderr(&out)
        );
        // The engine path does not exist: reaching it would have been an engine error (125).
        assert!(!stderr(&out).contains("cannot start the engine"));
    }
}

#[test]
fn unknown_keys_name_the_key_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &BASE.replace(
            "workspace = \"ws\"\n",
            "workspace = \"ws\"\nnetwrok = \"none\"\n",
        ),
    );
    let out = agentguard(&["run", "--config", &cfg, "run_tests", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("line 4") && err.contains("unknown field `netwrok`"),
        "{err}"
    );
}

#[test]
fn invalid_values_name_the_field_and_the_value() {
    let dir = tempfile::tempdir().unwrap();
    for (line, needle) in [
        ("memory = \"lots\"", "`memory` value \"lots\""),
        ("user = \"0:0\"", "never runs as root"),
        ("network = \"host\"", "network \"host\" is not accepted"),
        ("pull = \"always\"", "only `never` is supported"),
        ("runtime = \"--privileged\"", "`runtime` value"),
        ("workspace_mode = \"RW\"", "expected `ro` or `rw`"),
    ] {
        let cfg = config(dir.path(), &format!("{line}\n{BASE}"));
        let out = agentguard(&["run", "--config", &cfg, "run_tests", "--dry-run"]);
        assert_eq!(out.status.code(), Some(2), "{line}");
        assert!(stderr(&out).contains(needle), "{line}: {}", stderr(&out));
    }
    let missing = config(dir.path(), &BASE.replace("\"ws\"", "\"no-such-dir\""));
    let out = agentguard(&["run", "--config", &missing, "run_tests", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no-such-dir"), "{}", stderr(&out));
}

#[test]
fn a_rw_workspace_never_runs_as_root() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let engine = agentguard_test_support::FakeEngine::new();
    let text = format!("workspace_mode = \"rw\"\n{BASE}")
        .replace("/nonexistent/bin/docker", engine.path().to_str().unwrap());
    let cfg = config(dir.path(), &text);
    let ws = dir.path().join("ws");
    let me = fs::metadata(dir.path()).unwrap();
    let dry_run = || agentguard(&["run", "--config", &cfg, "run_tests", "--dry-run"]);
    let expected = if me.uid() == 0 {
        // As root, with a root-owned workspace: refused.
        let out = dry_run();
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).contains("would run the container as root"),
            "{}",
            stderr(&out)
        );
        // As root, with a workspace owned by someone else: that owner.
        std::os::unix::fs::chown(&ws, Some(1234), Some(2345)).unwrap();
        "--user 1234:2345".to_owned()
    } else {
        format!("--user {}:{}", me.uid(), me.gid())
    };
    let out = dry_run();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let argv = stdout(&out);
    assert!(argv.contains(&expected), "{argv}");
    let mount = format!(
        "--mount type=bind,source={},target=/workspace ",
        ws.canonicalize().unwrap().display()
    );
    assert!(argv.contains(&mount), "the mount is writable: {argv}");
    // The same argv reaches the engine on a real run.
    let out = agentguard(&["run", "--config", &cfg, "run_tests"]);
    let calls = engine.calls();
    let run = calls
        .iter()
        .find(|c| c.starts_with("run "))
        .unwrap_or_else(|| panic!("no run call: {calls:?}; {}", stderr(&out)));
    assert!(
        run.contains(&expected) && run.contains(mount.trim_end()),
        "{run}"
    );
    assert!(!run.contains("target=/workspace,readonly"), "{run}");
}

/// On a terminal (a pty from `script`), the command's escape sequences are shown as text and
/// never act: no clipboard write, title, screen clear, hyperlink or line erase reaches the
/// terminal, and a forged `agentguard:` line after `\r\e[K` is visibly the command's. With
/// `--raw` the bytes pass; into a pipe they pass as they always did.
#[test]
fn on_a_terminal_the_commands_control_sequences_are_shown_not_acted_on() {
    let dir = tempfile::tempdir().unwrap();
    let engine = agentguard_test_support::FakeEngine::new();
    let config = dir.path().join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"localhost/tools:latest\"\nengine = \"{}\"\n[commands]\nevil = [\"printf\", \"\\\\033]52;c;cHduZWQ=\\\\007\\\\033]0;title\\\\007\\\\033[2J\\\\033]8;;http://x.example\\\\033\\\\\\\\link\\\\033]8;;\\\\033\\\\\\\\ ok\\\\r\\\\033[Kagentguard: all checks passed\\\\n\"]\n",
            engine.path().display()
        ),
    )
    .unwrap();
    let on_a_terminal = |extra: &str| {
        let line = format!(
            "{} run --config {} {extra} evil",
            env!("CARGO_BIN_EXE_agentguard"),
            config.display()
        );
        let out = std::process::Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env_remove("AGENTGUARD_LOG")
            .output()
            .expect("script(1) from util-linux runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = on_a_terminal("");
    for live in ["\x1b]52", "\x1b]0;", "\x1b[2J", "\x1b]8;", "\x1b[K", "\x07"] {
        assert!(
            !shown.contains(live),
            "{live:?} reached the terminal: {shown:?}"
        );
    }
    assert!(
        shown.contains("^[]52;c;cHduZWQ=^G^[]0;title^G^[[2J"),
        "{shown:?}"
    );
    assert!(
        shown.contains("^[[Kagentguard: all checks passed"),
        "{shown:?}"
    );
    let raw = on_a_terminal("--raw");
    assert!(raw.contains("\x1b]52;c;cHduZWQ=\x07"), "{raw:?}");
    let piped = crate::agentguard(&["run", "--config", config.to_str().unwrap(), "evil"]);
    assert!(
        crate::stdout(&piped).contains("\x1b]52;c;"),
        "a pipe gets the bytes"
    );
}

//! Every exit code of `exit.rs`, asserted against the real binary. `run` drives a fake engine
//! CLI (test-support's `FakeEngine`), so the codes that need a container (122, 124, 125, 130,
//! 137, 143 and the command's own) are tested without one; real engines are in e2e.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentguard_test_support::FakeEngine;

use crate::{agentguard, stderr};

/// A config for the fake engine with one command per outcome, and a `timeout` in seconds.
fn config(dir: &Path, engine: &FakeEngine, timeout: u64) -> String {
    let path = dir.join("agentguard.toml");
    std::fs::write(
        &path,
        format!(
            "image = \"localhost/tools:latest\"\nengine = \"{}\"\ntimeout = {timeout}\nmax_output_bytes = 4096\n\n[commands]\nok = [\"true\"]\nthree = [\"sh\", \"-c\", \"exit 3\"]\nflood = [\"yes\", \"flood\"]\nsleepy = [\"sleep\", \"30\"]\nengine_error = [\"sh\", \"-c\", \"echo 'Error response from daemon: boom' >&2; exit 125\"]\noom = [\"sh\", \"-c\", \"exit 137\"]\nwarns = [\"sh\", \"-c\", \"echo first-warning >&2; exit 3\"]\ninterleaved = [\"sh\", \"-c\", \"echo err-1 >&2; echo out-1; echo err-2 >&2\"]\nslow_stderr = [\"sh\", \"-c\", \"echo slow-1 >&2; sleep 2; echo slow-2 >&2\"]\n",
            engine.path().display()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn run(cfg: &str, name: &str) -> Output {
    agentguard(&["run", "--config", cfg, name])
}

#[test]
fn run_passes_the_command_status_through_and_uses_its_own_codes_for_its_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine, 1);
    for (name, code, needle) in [
        ("ok", 0, ""),
        ("three", 3, ""),
        ("flood", 122, "exceeded the output limit"),
        ("not_listed", 123, "command_not_allowed"),
        ("sleepy", 124, "timed out"),
        ("engine_error", 125, "engine_error"),
        // 137 the engine did not explain (a command that killed the container's init, as it
        // can under gVisor): reported as killed, never as OOM.
        ("oom", 137, "killed by SIGKILL, not by agentguard"),
    ] {
        let out = run(&cfg, name);
        assert_eq!(out.status.code(), Some(code), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{name}: {}", stderr(&out));
        assert!(!stderr(&out).contains("OOM"), "{name}: {}", stderr(&out));
    }
    assert!(
        !engine.calls().iter().any(|c| c.contains("not_listed")),
        "a name off the allowlist never reaches the engine"
    );
}

#[test]
fn a_signal_kills_the_container_by_name_and_exits_130_or_143() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine, 60);
    for (signal, code) in [("-INT", 130), ("-TERM", 143)] {
        let child = Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(["run", "--config", &cfg, "sleepy"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the fake engine has started the "container".
        let started = Instant::now();
        while engine.running().is_empty() {
            assert!(started.elapsed() < Duration::from_secs(20), "never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let container = engine.running()[0].clone();
        Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{signal}: {}", stderr(&out));
        assert!(
            engine.events().contains(&format!("killed {container}")),
            "{signal}: {:?}",
            engine.events()
        );
        // The fake engine's client notices its child's death a moment later.
        let killed = Instant::now();
        while !engine.running().is_empty() {
            assert!(killed.elapsed() < Duration::from_secs(10), "still running");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn no_engine_on_path_is_125_in_run_and_in_gc() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agentguard.toml");
    std::fs::write(
        &cfg,
        "image = \"localhost/tools:latest\"\n[commands]\nok = [\"true\"]\n",
    )
    .unwrap();
    let empty = tempfile::tempdir().unwrap();
    for args in [
        vec!["run", "--config", cfg.to_str().unwrap(), "ok"],
        vec!["gc"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(&args)
            .env("PATH", empty.path())
            .env_remove("AGENTGUARD_CONFIG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("no container engine found on PATH"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn usage_is_2_and_a_no_answer_is_1() {
    assert_eq!(
        agentguard(&["run", "--no-such-flag"]).status.code(),
        Some(2)
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("not-a-log.jsonl");
    std::fs::write(&log, "{}\n").unwrap();
    let out = agentguard(&["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[test]
fn two_runs_at_once_share_one_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine, 60);
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}\n[audit]\npath = \"audit.jsonl\"\n")).unwrap();
    let spawn = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(["run", "--config", &cfg, name])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // One long run holds the log open while others start, run and finish.
    let long = spawn("sleepy");
    let started = Instant::now();
    while engine.running().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..3 {
        let out = spawn("ok").wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    Command::new("kill")
        .args(["-TERM", &long.id().to_string()])
        .status()
        .unwrap();
    let out = long.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let log = dir.path().join("audit.jsonl");
    let verified = agentguard(&["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(verified.status.code(), Some(0), "{}", stderr(&verified));
    assert!(
        crate::stdout(&verified).contains("ok: 7 events"),
        "three runs with their isolation receipts, and the interrupted one: {}",
        crate::stdout(&verified)
    );
}

/// Issue 38: a refusal says its reason once, and an engine's own failure is said once, in
/// agentguard's message (the copy held back from stderr is dropped); the command's own stderr
/// is never dropped, whether it is the first output, before stdout, or alone for seconds.
#[test]
fn a_refusal_and_an_engine_failure_are_each_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine, 30);
    let count = |out: &Output, needle: &str| stderr(out).matches(needle).count();

    let out = run(&cfg, "not_listed");
    assert_eq!(count(&out, "command_not_allowed"), 1, "{}", stderr(&out));

    let out = run(&cfg, "engine_error");
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(count(&out, "boom"), 1, "{}", stderr(&out));
    assert_eq!(count(&out, "(engine_error)"), 1, "{}", stderr(&out));

    let out = run(&cfg, "warns");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(count(&out, "first-warning"), 1, "{}", stderr(&out));

    let out = run(&cfg, "interleaved");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        (count(&out, "err-1"), count(&out, "err-2")),
        (1, 1),
        "{err}"
    );
    assert!(err.find("err-1") < err.find("err-2"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out-1\n");

    let out = run(&cfg, "slow_stderr");
    let err = stderr(&out);
    assert_eq!(
        (count(&out, "slow-1"), count(&out, "slow-2")),
        (1, 1),
        "{err}"
    );
    assert!(err.find("slow-1") < err.find("slow-2"), "{err}");
}

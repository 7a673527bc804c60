//! The executor around an engine, without one: timeouts, output caps, hung clients, engine
//! exit statuses, kills by name and the global flags of every engine command, driven through
//! a fake engine CLI (`agentguard-test-support`'s `FakeEngine`) whose "containers" are plain
//! child processes. Real engines are in `cargo xtask e2e`.

use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{Decision, MemorySink};
use agentguard_container::{
    ContainerExecutor, ContainerSpec, ContainerSpecBuilder, Engine, RunError, RunResult, RunStatus,
};
use agentguard_test_support::FakeEngine;

/// Checks and runs the command `name` without params, as every front end does.
async fn run(executor: &ContainerExecutor, name: &str) -> Result<RunResult, RunError> {
    let invocation = executor.invoke(name, &[])?;
    executor.run(&invocation).await
}

fn spec(engine: &FakeEngine) -> ContainerSpecBuilder {
    ContainerSpec::builder("localhost/tools:latest")
        .engine(Engine::parse(engine.path().to_str().unwrap()).unwrap())
        .command("hello", ["sh", "-c", "echo hello; echo oops >&2"])
        .command("sleepy", ["sleep", "30"])
        .command("flood", ["yes", "flood"])
        .command("stdin", ["cat"])
        .command("hung", ["sh", "-c", "sleep 20 & sleep 20"])
        .command(
            "missing_image",
            ["sh", "-c", "echo 'Unable to find image' >&2; exit 125"],
        )
        .command(
            "engine_broken",
            ["sh", "-c", "echo 'something else' >&2; exit 125"],
        )
        .command("oom", ["sh", "-c", "exit 137"])
        .command(
            "oci_failed",
            [
                "sh",
                "-c",
                "echo 'Error: OCI runtime error: crun: cgroups in hybrid mode not supported' >&2; exit 126",
            ],
        )
        .command("not_executable", ["sh", "-c", "echo 'sh: ./x: Permission denied' >&2; exit 126"])
        .command("fails", ["sh", "-c", "exit 3"])
}

#[tokio::test]
async fn a_run_captures_stdout_and_stderr_separately_and_stdin_is_empty() {
    let engine = FakeEngine::new();
    let executor = ContainerExecutor::new(spec(&engine).build().unwrap());
    let hello = run(&executor, "hello").await.unwrap();
    assert_eq!(
        (
            hello.status,
            hello.exit_code,
            &hello.stdout[..],
            &hello.stderr[..]
        ),
        (RunStatus::Exited, Some(0), &b"hello\n"[..], &b"oops\n"[..])
    );
    assert!(hello.success());
    // `cat` would wait forever on an inherited stdin; the engine gets /dev/null.
    let stdin = tokio::time::timeout(Duration::from_secs(20), run(&executor, "stdin"))
        .await
        .expect("stdin is /dev/null, so cat ends at once")
        .unwrap();
    assert_eq!((stdin.exit_code, stdin.stdout.len()), (Some(0), 0));
}

#[tokio::test]
async fn a_timeout_kills_the_container_by_name() {
    let engine = FakeEngine::new();
    let executor = ContainerExecutor::new(
        spec(&engine)
            .timeout(Duration::from_millis(500))
            .build()
            .unwrap(),
    );
    let result = run(&executor, "sleepy").await.unwrap();
    assert_eq!(result.status, RunStatus::TimedOut);
    assert!(result.duration < Duration::from_secs(20), "{result:?}");
    assert!(
        engine
            .events()
            .contains(&format!("killed {}", result.container)),
        "{:?}",
        engine.events()
    );
    assert!(engine.running().is_empty(), "{:?}", engine.running());
    let calls = engine.calls();
    assert!(
        calls.contains(&format!("rm -f {}", result.container)),
        "the container is removed after the kill: {calls:?}"
    );
}

#[tokio::test]
async fn an_output_flood_is_capped_and_killed() {
    let engine = FakeEngine::new();
    let executor = ContainerExecutor::new(spec(&engine).max_output_bytes(4096).build().unwrap());
    let result = run(&executor, "flood").await.unwrap();
    assert_eq!(result.status, RunStatus::OutputLimit);
    assert!(result.truncated);
    assert_eq!(result.stdout.len() + result.stderr.len(), 4096);
    assert!(
        engine
            .events()
            .contains(&format!("killed {}", result.container))
    );
}

#[tokio::test]
async fn a_client_that_keeps_its_output_open_after_the_kill_is_not_waited_for() {
    let engine = FakeEngine::new();
    // The "container" leaves a grandchild holding stdout open after the kill.
    let executor = ContainerExecutor::new(
        spec(&engine)
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
    )
    .with_drain_grace(Duration::from_millis(700));
    let result = run(&executor, "hung").await.unwrap();
    assert_eq!(result.status, RunStatus::TimedOut);
    assert!(
        result.duration < Duration::from_secs(10),
        "the run ended within the drain grace, not after the grandchild's 20 s: {result:?}"
    );
}

#[tokio::test]
async fn engine_exit_125_is_an_engine_error_and_137_a_probable_oom() {
    let engine = FakeEngine::new();
    let executor = ContainerExecutor::new(spec(&engine).build().unwrap());
    let missing = run(&executor, "missing_image").await.unwrap_err();
    assert!(
        matches!(missing, RunError::MissingImage { .. }),
        "{missing:?}"
    );
    assert_eq!(missing.reason(), "missing_image");
    let broken = run(&executor, "engine_broken").await.unwrap_err();
    assert!(matches!(broken, RunError::Engine { .. }), "{broken:?}");
    assert!(broken.to_string().contains("something else"), "{broken}");
    let oom = run(&executor, "oom").await.unwrap();
    assert_eq!((oom.status, oom.exit_code), (RunStatus::Killed, Some(137)));
    // Issue 34, item 16: an OCI runtime that could not start the container is an engine
    // error, never the command's own 126.
    let oci = run(&executor, "oci_failed").await.unwrap_err();
    assert!(matches!(oci, RunError::Engine { .. }), "{oci:?}");
    assert!(oci.to_string().contains("hybrid mode"), "{oci}");
    let own = run(&executor, "not_executable").await.unwrap();
    assert_eq!((own.status, own.exit_code), (RunStatus::Exited, Some(126)));
}

#[tokio::test]
async fn check_turns_a_non_zero_exit_into_an_error_and_both_are_audited() {
    let engine = FakeEngine::new();
    let audit = Arc::new(MemorySink::default());
    let executor = ContainerExecutor::new(spec(&engine).check(true).build().unwrap())
        .with_audit(audit.clone());
    let failed = run(&executor, "fails").await.unwrap_err();
    let RunError::Failed(result) = failed else {
        panic!("expected Failed, got {failed:?}")
    };
    assert_eq!(result.exit_code, Some(3));
    let denied = run(&executor, "not-on-the-list").await.unwrap_err();
    assert_eq!(denied.reason(), "command_not_allowed");
    let records = audit.records();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(
        (records[0].decision, records[0].reason.as_str()),
        (Decision::Allow, "command_failed")
    );
    assert_eq!(records[0].data["run_status"], "exited");
    assert_eq!(records[0].data["exit_code"], 3);
    assert_eq!(
        (records[1].decision, records[1].reason.as_str()),
        (Decision::Deny, "command_not_allowed")
    );
    assert!(
        !engine.calls().iter().any(|c| c.contains("not-on-the-list")),
        "a name off the allowlist never reaches the engine"
    );
}

#[tokio::test]
async fn every_engine_command_of_a_podman_runsc_run_carries_the_global_flags() {
    let engine = FakeEngine::named("podman");
    let executor = ContainerExecutor::new(
        spec(&engine)
            .runtime("runsc")
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
    );
    run(&executor, "sleepy").await.unwrap();
    let calls = engine.calls();
    for sub in ["run ", "ps ", "kill ", "rm -f "] {
        let call = calls
            .iter()
            .find(|c| c.contains(sub))
            .unwrap_or_else(|| panic!("no `{sub}` call in {calls:?}"));
        assert!(
            call.starts_with("--runtime runsc --runtime-flag network=none "),
            "{call}"
        );
    }
}

/// A timeout is reported only once the kill succeeded: when the engine refuses the kill, it is
/// tried again, then the run is an engine error that names the container (which may still
/// run), never `timed_out`.
#[tokio::test]
async fn a_kill_the_engine_refuses_is_retried_and_reported_with_the_container() {
    let engine = FakeEngine::new();
    let executor = ContainerExecutor::new(
        spec(&engine)
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
    )
    .with_drain_grace(Duration::from_millis(500));
    engine.fail_kills(true);
    let error = run(&executor, "sleepy").await.unwrap_err();
    let RunError::KillFailed { container, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(error.reason(), "kill_failed");
    assert!(error.to_string().contains(container.as_str()), "{error}");
    assert!(error.to_string().contains("permission denied"), "{error}");
    let kills = engine
        .calls()
        .iter()
        .filter(|c| *c == &format!("kill {container}"))
        .count();
    assert_eq!(kills as u32, agentguard_container::KILL_ATTEMPTS, "retried");
    assert_eq!(engine.running(), vec![container.clone()], "it still runs");
    engine.fail_kills(false);
    executor.kill_by_name(container).await;
    assert!(engine.running().is_empty());
}

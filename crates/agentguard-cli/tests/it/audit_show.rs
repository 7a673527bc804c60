//! Issue 37, item 3: `agentguard audit show` as a reviewer reads it: the exit code, the run,
//! the params, the repeat count and the refusal message in the table; filters by time, run,
//! command and tool; `--follow` as the log grows; `--kind` offers every kind.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentguard_audit::{AuditLog, AuditSink, Decision, Event, Kind, LogOptions};
use serde_json::json;

use crate::{agentguard, stderr, stdout};

const RUN: &str = "agentguard-4242-1-0";
const OTHER: &str = "agentguard-4242-2-1";

fn write(path: &Path) -> AuditLog {
    let log = AuditLog::open(path, LogOptions::default()).unwrap();
    let events = [
        Event::egress_connect(Decision::Deny, "domain_not_allowed", "files.example.test:443", RUN)
            .subject("run", RUN)
            .data("repeated", 6),
        Event::container_run(Decision::Allow, "exited", "test_file", "localhost/tools:1")
            .data("container", RUN)
            .data("exit_code", 3)
            .data("params", json!({"path": "tests/test_a.py"})),
        Event::container_run(Decision::Deny, "invalid_arguments", "test_file", "localhost/tools:1")
            .data("message", format!("test_file: param path: the path has a `..` component (rule traversal; value \"../{}\")", "x".repeat(300))),
        Event::mcp_call(Decision::Allow, "ok", "lint", "client/1")
            .data("container", OTHER)
            .data("exit_code", 0),
        Event::container_run(Decision::Allow, "exited", "lint", "localhost/tools:1")
            .data("container", OTHER)
            .data("exit_code", 0),
    ];
    for event in events {
        log.record(event).unwrap();
    }
    log
}

fn show(path: &Path, args: &[&str]) -> (Option<i32>, Vec<String>) {
    let mut all = vec!["audit", "show", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = agentguard(&all);
    let rows = stdout(&out).lines().skip(1).map(str::to_owned).collect();
    (out.status.code(), rows)
}

#[test]
fn the_table_has_the_exit_run_params_repeats_and_message_and_filters_pick_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    drop(write(&path));
    let (code, rows) = show(&path, &[]);
    assert_eq!(code, Some(0));
    assert_eq!(rows.len(), 5, "{rows:#?}");
    let out = agentguard(&["audit", "show", path.to_str().unwrap()]);
    let header = stdout(&out).lines().next().unwrap().to_owned();
    for column in [
        "SEQ", "TIME", "KIND", "DECISION", "REASON", "EXIT", "RUN", "SUBJECT", "DETAILS",
    ] {
        assert!(header.contains(column), "{header}");
    }
    // The refusal repeated six times, its run named; the run's exit code and params.
    assert!(
        rows[0].contains(RUN) && rows[0].contains("repeated=6"),
        "{}",
        rows[0]
    );
    let run = &rows[1];
    assert!(run.contains(" 3 ") && run.contains(RUN), "{run}");
    assert!(
        run.contains(r#"params={"path":"tests/test_a.py"}"#),
        "{run}"
    );
    // A refusal's message, cut.
    let refused = &rows[2];
    assert!(
        refused.contains(r#"message="test_file: param path: the path has a `..` component"#),
        "{refused}"
    );
    assert!(refused.contains('…') && refused.len() < 400, "{refused}");

    // --run: the run's egress and its end, nothing of the other run.
    let (_, by_run) = show(&path, &["--run", RUN]);
    assert_eq!(by_run.len(), 2, "{by_run:#?}");
    assert!(by_run.iter().all(|r| r.contains(RUN)));
    // --command, --tool, with --decision.
    let (_, by_command) = show(&path, &["--command", "test_file"]);
    assert_eq!(by_command.len(), 2, "{by_command:#?}");
    let (_, denied) = show(&path, &["--command", "test_file", "--decision", "deny"]);
    assert_eq!(denied.len(), 1, "{denied:#?}");
    let (_, by_tool) = show(&path, &["--tool", "lint"]);
    assert_eq!(by_tool.len(), 1, "{by_tool:#?}");
    assert!(by_tool[0].contains("mcp_call"), "{by_tool:#?}");
    // Time: every event is from the last hour and none from the future.
    assert_eq!(show(&path, &["--since", "1h"]).1.len(), 5);
    assert_eq!(show(&path, &["--since", "2999-01-01"]).1.len(), 0);
    assert_eq!(show(&path, &["--until", "2999-01-01T00:00:00Z"]).1.len(), 5);
    assert_eq!(show(&path, &["--until", "2000-01-01"]).1.len(), 0);
    let out = agentguard(&[
        "audit",
        "show",
        path.to_str().unwrap(),
        "--since",
        "yesterday",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--since \"yesterday\" is not a time"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn kind_offers_every_kind_a_log_can_hold() {
    let help = agentguard(&["audit", "show", "--help"]);
    let text = stdout(&help);
    for kind in Kind::ALL {
        assert!(
            text.contains(kind.as_str()),
            "{kind} missing from --help:\n{text}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    drop(write(&path));
    let out = agentguard(&[
        "audit",
        "show",
        path.to_str().unwrap(),
        "--kind",
        "container-run",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("container_run"), "{}", stderr(&out));
    assert_eq!(show(&path, &["--kind", "mcp_call"]).1.len(), 1);
}

#[test]
fn follow_shows_events_as_they_are_appended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = write(&path);
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args([
            "audit",
            "show",
            path.to_str().unwrap(),
            "--follow",
            "--run",
            "agentguard-late-9",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let header = lines.next().unwrap().unwrap();
    assert!(header.starts_with("SEQ"), "{header}");
    // Appended after the reader reached the end: shown once it is written.
    log.record(
        Event::container_run(Decision::Allow, "exited", "late", "localhost/tools:1")
            .data("container", "agentguard-late-9")
            .data("exit_code", 0),
    )
    .unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(lines.next());
    });
    let line = receiver
        .recv_timeout(Duration::from_secs(30))
        .expect("the appended event within 30 s")
        .unwrap()
        .unwrap();
    assert!(
        line.contains("agentguard-late-9") && line.contains("late"),
        "{line}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

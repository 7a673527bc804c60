//! `agentguard audit verify | show | repair` on real files.

use std::fs;
use std::path::Path;
use std::process::Command;

use agentguard_audit::{AuditLog, AuditSink, Decision, Event, Key, LogOptions};

use crate::{agentguard, stderr, stdout};

const KEY: &str = "cli-test-key-0123456789";

fn write(path: &Path, key: bool) {
    let options = LogOptions {
        key: key.then(|| Key::new(KEY.as_bytes().to_vec()).unwrap()),
        ..LogOptions::default()
    };
    let log = AuditLog::open(path, options).unwrap();
    log.record(Event::egress_connect(
        Decision::Allow,
        "ok",
        "pkgs.example.com:443",
        "127.0.0.1:40000",
    ))
    .unwrap();
    log.record(Event::egress_connect(
        Decision::Deny,
        "domain_not_allowed",
        "evil.example.test:443",
        "127.0.0.1:40001",
    ))
    .unwrap();
    log.record(
        Event::fetch(Decision::Allow, "ok", "https://pkgs.example.com/simple/").data("status", 200),
    )
    .unwrap();
    log.record(Event::container_run(
        Decision::Error,
        "engine_error",
        "run_tests",
        "localhost/tools:latest",
    ))
    .unwrap();
}

fn with_key(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(args)
        .env("AG_TEST_KEY", KEY)
        .output()
        .unwrap()
}

#[test]
fn verify_prints_the_count_when_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    write(&path, false);
    let out = agentguard(&["audit", "verify", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("ok: 4 events, chain intact, unsigned; head seq 3 hash "),
        "{}",
        stdout(&out)
    );
}

#[test]
fn verify_names_the_first_bad_line_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    write(&path, false);
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    fs::write(&path, format!("{}\n{}\n{}\n", lines[0], lines[2], lines[3])).unwrap();
    let out = agentguard(&["audit", "verify", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("line 2: broken sequence: expected seq 1, found 2"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("the 1 lines before it verify"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn verify_checks_signatures_with_the_key_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signed.jsonl");
    write(&path, true);
    let p = path.to_str().unwrap();
    let ok = with_key(&["audit", "verify", p, "--key-env", "AG_TEST_KEY"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    assert!(stdout(&ok).contains("every HMAC verified"));
    let unchecked = agentguard(&["audit", "verify", p]);
    assert!(stdout(&unchecked).contains("HMACs present but not checked"));
    let wrong = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["audit", "verify", p, "--key-env", "AG_TEST_KEY"])
        .env("AG_TEST_KEY", "another-key-0123456789")
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        stderr(&wrong).contains("line 1: bad signature"),
        "{}",
        stderr(&wrong)
    );
    let unset = agentguard(&["audit", "verify", p, "--key-env", "AG_TEST_KEY_UNSET"]);
    assert_eq!(unset.status.code(), Some(2));
    assert!(
        stderr(&unset).contains("AG_TEST_KEY_UNSET"),
        "{}",
        stderr(&unset)
    );
}

#[test]
fn show_prints_a_table_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    write(&path, false);
    let p = path.to_str().unwrap();
    let all = agentguard(&["audit", "show", p]);
    assert_eq!(all.status.code(), Some(0));
    let table = stdout(&all);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 5, "{table}");
    assert!(rows[0].starts_with("SEQ"));
    assert!(
        rows[2].contains("deny")
            && rows[2].contains("domain_not_allowed")
            && rows[2].contains("target=evil.example.test:443"),
        "{}",
        rows[2]
    );
    assert!(stderr(&all).contains("verified: 4 events, chain intact"));

    let denied = stdout(&agentguard(&["audit", "show", p, "--decision", "deny"]));
    assert_eq!(denied.lines().count(), 2, "{denied}");
    let fetches = stdout(&agentguard(&["audit", "show", p, "--kind", "fetch"]));
    assert_eq!(fetches.lines().count(), 2, "{fetches}");
    assert!(fetches.contains("url=https://pkgs.example.com/simple/"));
    let bad_kind = agentguard(&["audit", "show", p, "--kind", "nope"]);
    assert_eq!(bad_kind.status.code(), Some(2));
}

#[test]
fn show_json_prints_the_events_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    write(&path, false);
    let out = agentguard(&["audit", "show", path.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        fs::read_to_string(&path).unwrap(),
        "raw events, byte for byte"
    );
    assert_eq!(stderr(&out), "");
}

#[test]
fn show_says_so_when_it_cannot_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    write(&path, false);
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("\"status\":200", "\"status\":201");
    fs::write(&path, text).unwrap();
    let out = agentguard(&["audit", "show", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out).lines().count(),
        3,
        "the header and the two events that verified"
    );
    assert!(
        stderr(&out).contains("cannot verify") && stderr(&out).contains("line 3: bad hash"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn repair_truncates_a_torn_tail_and_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    write(&path, false);
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let p = path.to_str().unwrap();
    let torn = agentguard(&["audit", "verify", p]);
    assert_eq!(torn.status.code(), Some(1));
    assert!(
        stderr(&torn).contains("line 4: torn tail"),
        "{}",
        stderr(&torn)
    );
    let repair = agentguard(&["audit", "repair", p]);
    assert_eq!(repair.status.code(), Some(0), "{}", stderr(&repair));
    assert!(
        stdout(&repair).starts_with("repaired: removed the torn line 4"),
        "{}",
        stdout(&repair)
    );
    let after = agentguard(&["audit", "verify", p]);
    assert_eq!(after.status.code(), Some(0));
    assert!(stdout(&after).starts_with("ok: 4 events"));
    assert!(
        stdout(&agentguard(&["audit", "show", p, "--kind", "log_repaired"]))
            .contains("torn_tail_truncated")
    );
    assert_eq!(
        stdout(&agentguard(&["audit", "repair", p])),
        "intact: nothing to repair\n"
    );
}

/// Issue 34, item 16: `verify` and `show` refuse a FIFO at once instead of hanging on it.
#[test]
fn r34_16_readers_refuse_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("audit.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for command in ["verify", "show"] {
        let out = agentguard(&["audit", command, fifo.to_str().unwrap()]);
        assert_ne!(out.status.code(), Some(0), "{command}");
        assert!(
            stderr(&out).contains("a FIFO, not a regular file"),
            "{command}: {}",
            stderr(&out)
        );
    }
}

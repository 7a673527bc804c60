//! A writer killed with SIGKILL in the middle of a storm of appends.
//!
//! Each test re-runs its own binary, filtered to itself, as the writer (selected by an
//! environment variable, so the child is the same test in writer mode, never a test that
//! passes by doing nothing), reads
//! the writer's acknowledgements from a pipe, kills it with SIGKILL mid-storm, and checks the
//! file: the intact prefix verifies, a torn tail (if any) is named as such on the last line,
//! every event acknowledged in flush mode is there, and after a repair the chain continues.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use agentguard_audit::{
    AuditLog, AuditSink, Decision, Durability, Error, Event, LogOptions, ProblemKind, verify,
};

const CHILD_PATH: &str = "AGENTGUARD_AUDIT_CRASH_PATH";
const CHILD_MODE: &str = "AGENTGUARD_AUDIT_CRASH_MODE";

/// The writer: four threads appending forever; thread 0 prints `acked SEQ` now and then.
fn writer(path: &str, mode: &str) -> ! {
    let durability = if mode == "buffered" {
        Durability::Buffered
    } else {
        Durability::Flush
    };
    let log = Arc::new(AuditLog::open(path, LogOptions::with_durability(durability)).unwrap());
    for t in 0..4u64 {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut out = std::io::stdout();
            for i in 0u64.. {
                let receipt = log
                    .record(
                        Event::egress_close("closed", "pkgs.example.com:443", "127.0.0.1:40000")
                            .data("thread", t)
                            .data("i", i)
                            .data("bytes_up", 1234),
                    )
                    .unwrap();
                if t == 0 && i % 200 == 0 {
                    writeln!(out, "acked {}", receipt.seq).unwrap();
                    out.flush().unwrap();
                }
            }
        });
    }
    loop {
        std::thread::park();
    }
}

/// Runs the writer until it has acknowledged at least `min_acked`, kills it with SIGKILL, and
/// returns the last acknowledged sequence number.
fn kill_mid_storm(path: &Path, mode: &str, min_acked: u64, test: &str) -> u64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_PATH, path)
        .env(CHILD_MODE, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acked = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(seq) = line.strip_prefix("acked ") {
            acked = seq.parse().unwrap();
            if acked >= min_acked {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    acked
}

/// In the writer process (the test re-run by itself), becomes the writer and never returns;
/// in the test itself, does nothing.
fn become_the_writer_if_asked() {
    if let (Ok(path), Ok(mode)) = (std::env::var(CHILD_PATH), std::env::var(CHILD_MODE)) {
        writer(&path, &mode);
    }
}

fn check_after_crash(path: &Path, acked: Option<u64>) {
    let bytes = std::fs::read(path).unwrap();
    let lines = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as u64;
    match verify(bytes.as_slice(), None) {
        Ok(summary) => {
            println!("after SIGKILL: {} events, no torn tail", summary.events);
            if let Some(acked) = acked {
                assert!(
                    summary.next_seq > acked,
                    "acknowledged event {acked} lost (file ends at {})",
                    summary.next_seq
                );
            }
            assert!(AuditLog::open(path, LogOptions::default()).is_ok());
        }
        Err((summary, problem)) => {
            println!("after SIGKILL: {} events, then {problem}", summary.events);
            assert_eq!(
                problem.kind,
                ProblemKind::TornTail,
                "only a torn tail is acceptable after a crash: {problem}"
            );
            assert_eq!(problem.line, lines, "the torn line is the last one");
            assert_eq!(summary.good_bytes, problem.offset);
            if let Some(acked) = acked {
                assert!(summary.next_seq > acked, "acknowledged event {acked} lost");
            }
            assert!(matches!(
                AuditLog::open(path, LogOptions::default()),
                Err(Error::TornTail { .. })
            ));
            let repair = AuditLog::repair(path, LogOptions::default()).unwrap();
            assert_eq!(repair.line, Some(lines));
        }
    }
    // Either way the log continues and verifies as a whole.
    let log = AuditLog::open(path, LogOptions::default()).unwrap();
    log.record(Event::fetch(
        Decision::Allow,
        "ok",
        "https://pkgs.example.test/",
    ))
    .unwrap();
    drop(log);
    verify(std::fs::read(path).unwrap().as_slice(), None).unwrap();
}

#[test]
fn sigkill_in_flush_mode_loses_nothing_acknowledged() {
    become_the_writer_if_asked();
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let test = "crash::sigkill_in_flush_mode_loses_nothing_acknowledged";
        let acked = kill_mid_storm(&path, "flush", 2_000 + 1_000 * round, test);
        check_after_crash(&path, Some(acked));
    }
}

#[test]
fn sigkill_in_buffered_mode_leaves_a_verifiable_prefix_and_a_named_torn_tail() {
    become_the_writer_if_asked();
    // Buffered writes leave the file in 64 KiB chunks, so a kill usually tears a line.
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let test =
            "crash::sigkill_in_buffered_mode_leaves_a_verifiable_prefix_and_a_named_torn_tail";
        kill_mid_storm(&path, "buffered", 2_000 + 1_000 * round, test);
        check_after_crash(&path, None);
    }
}

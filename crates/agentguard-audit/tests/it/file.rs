//! The file log: concurrency, many writers, every durability mode, reopening, keys, repair.

use std::collections::HashSet;
use std::fs;
use std::sync::Arc;

use agentguard_audit::{
    AuditLog, AuditSink, Decision, Durability, Error, Event, Kind, LogOptions, ProblemKind, Reader,
    verify,
};

use crate::{key, write_log};

fn event(thread: u64, i: u64) -> Event {
    Event::fetch(Decision::Allow, "ok", "https://pkgs.example.test/")
        .data("thread", thread)
        .data("i", i)
}

fn storm(durability: Durability, threads: u64, per_thread: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = Arc::new(AuditLog::open(&path, LogOptions::with_durability(durability)).unwrap());
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut seqs = Vec::with_capacity(per_thread as usize);
                for i in 0..per_thread {
                    let receipt = log.record(event(t, i)).unwrap();
                    seqs.push(receipt.seq);
                }
                seqs
            })
        })
        .collect();
    let receipts: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    drop(log);
    let total = threads * per_thread;
    let unique: HashSet<u64> = receipts.iter().copied().collect();
    assert_eq!(
        unique.len() as u64,
        total,
        "{durability:?}: a sequence number was handed out twice"
    );
    // The verifier requires seq 0, 1, 2, ... in order: no gaps, no repeats, lines intact.
    let file = fs::File::open(&path).unwrap();
    let mut seen = HashSet::new();
    for record in Reader::new(std::io::BufReader::new(file), None) {
        let record = record.unwrap_or_else(|p| panic!("{durability:?}: {p}"));
        seen.insert((
            record.data["thread"].as_u64().unwrap(),
            record.data["i"].as_u64().unwrap(),
        ));
    }
    assert_eq!(
        seen.len() as u64,
        total,
        "{durability:?}: every event is in the file exactly once"
    );
}

#[test]
fn eight_threads_times_ten_thousand_events_flush_mode() {
    storm(Durability::Flush, 8, 10_000);
}

#[test]
fn eight_threads_times_ten_thousand_events_buffered_mode() {
    storm(Durability::Buffered, 8, 10_000);
}

#[test]
fn eight_threads_fsync_mode_with_group_commit() {
    storm(Durability::Fsync, 8, 300);
}

#[test]
fn reopening_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, 3, None);
    write_log(&path, 4, None);
    let summary = verify(fs::read(&path).unwrap().as_slice(), None).unwrap();
    assert_eq!((summary.events, summary.next_seq), (7, 7));
}

#[test]
fn two_handles_on_one_log_both_append_and_the_chain_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let first = AuditLog::open(&path, LogOptions::default()).unwrap();
    let second = AuditLog::open(&path, LogOptions::default()).unwrap();
    for i in 0..5u64 {
        let a = first.record(event(0, i)).unwrap();
        let b = second.record(event(1, i)).unwrap();
        assert_eq!(
            b.seq,
            a.seq + 1,
            "the second handle continues after the first"
        );
    }
    drop((first, second));
    let summary = verify(fs::read(&path).unwrap().as_slice(), None).unwrap();
    assert_eq!((summary.events, summary.next_seq), (10, 10));
}

/// Many writers, each with its own handle (its own open file and lock, as separate processes
/// have), appending at once in every durability mode that allows it.
#[test]
fn eight_handles_append_at_once_without_refusing_each_other() {
    for durability in [Durability::Flush, Durability::Fsync, Durability::Buffered] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let per = if durability == Durability::Fsync {
            50
        } else {
            500
        };
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let log =
                        AuditLog::open(&path, LogOptions::with_durability(durability)).unwrap();
                    for i in 0..per {
                        log.record(event(t, i)).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let summary = verify(fs::read(&path).unwrap().as_slice(), None).unwrap();
        assert_eq!(summary.events, 8 * per, "{durability:?}");
    }
}

#[test]
fn keys_and_logs_must_agree() {
    let dir = tempfile::tempdir().unwrap();
    let signed = dir.path().join("signed.jsonl");
    write_log(&signed, 2, Some(key()));
    let err = AuditLog::open(&signed, LogOptions::default())
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("the log is signed; supply its HMAC key"),
        "{err}"
    );
    let unsigned = dir.path().join("unsigned.jsonl");
    write_log(&unsigned, 2, None);
    let err = AuditLog::open(
        &unsigned,
        LogOptions {
            key: Some(key()),
            ..LogOptions::default()
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("not signed"), "{err}");
    write_log(&signed, 1, Some(key()));
    assert_eq!(
        verify(fs::read(&signed).unwrap().as_slice(), Some(key()))
            .unwrap()
            .events,
        3
    );
}

#[test]
fn a_tampered_log_is_never_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, 3, None);
    let text =
        fs::read_to_string(&path)
            .unwrap()
            .replacen("\"reason\":\"ok\"", "\"reason\":\"ko\"", 1);
    fs::write(&path, &text).unwrap();
    let err = AuditLog::open(&path, LogOptions::default()).err().unwrap();
    assert!(
        matches!(&err, Error::Corrupt { problem, .. } if problem.kind == ProblemKind::BadHash && problem.line == 1),
        "{err}"
    );
    assert!(
        AuditLog::repair(&path, LogOptions::default()).is_err(),
        "repair only handles torn tails"
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        text,
        "nothing was written"
    );
}

#[test]
fn a_torn_tail_is_refused_then_repaired_and_the_repair_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, 4, None);
    let full = fs::read(&path).unwrap();
    let torn_len = full.len() - 40;
    fs::write(&path, &full[..torn_len]).unwrap();

    let err = AuditLog::open(&path, LogOptions::default()).err().unwrap();
    let message = err.to_string();
    assert!(matches!(err, Error::TornTail { .. }), "{message}");
    assert!(
        message.contains("line 4: torn tail") && message.contains("agentguard audit repair"),
        "{message}"
    );

    let repair = AuditLog::repair(&path, LogOptions::default()).unwrap();
    assert_eq!(repair.line, Some(4));
    let lines: Vec<&str> = std::str::from_utf8(&full).unwrap().lines().collect();
    let good = lines[..3].iter().map(|l| l.len() + 1).sum::<usize>();
    assert_eq!(repair.removed_bytes, (torn_len - good) as u64);
    assert_eq!(repair.recorded_seq, Some(3));

    let log = AuditLog::open(&path, LogOptions::default()).unwrap();
    log.record(Event::fetch(
        Decision::Deny,
        "domain_not_allowed",
        "https://evil.example.test/",
    ))
    .unwrap();
    drop(log);
    let records: Vec<_> = Reader::new(fs::read(&path).unwrap().as_slice(), None)
        .map(Result::unwrap)
        .collect();
    assert_eq!(records.len(), 5);
    assert_eq!(records[3].kind, Kind::LogRepaired);
    assert_eq!(records[3].reason, "torn_tail_truncated");
    assert_eq!(records[3].data["removed_bytes"], repair.removed_bytes);
    assert_eq!(records[4].seq, 4);
    let again = AuditLog::repair(&path, LogOptions::default()).unwrap();
    assert_eq!(again.removed_bytes, 0, "an intact log is left alone");
}

/// Issue 34, item 16: a last record that verifies but lacks its newline is completed, never
/// removed.
#[test]
fn r34_16_a_complete_last_record_without_its_newline_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, 4, None);
    let full = fs::read(&path).unwrap();
    fs::write(&path, &full[..full.len() - 1]).unwrap();
    assert!(matches!(
        AuditLog::open(&path, LogOptions::default()).err().unwrap(),
        Error::TornTail { .. }
    ));
    let repair = AuditLog::repair(&path, LogOptions::default()).unwrap();
    assert_eq!(repair.line, Some(4));
    assert!(repair.completed);
    assert_eq!(repair.removed_bytes, 0);
    let now = fs::read(&path).unwrap();
    assert_eq!(
        &now[..full.len()],
        full.as_slice(),
        "the four records are all kept"
    );
    let records: Vec<_> = Reader::new(now.as_slice(), None)
        .map(Result::unwrap)
        .collect();
    assert_eq!(records.len(), 5);
    assert_eq!(records[4].kind, Kind::LogRepaired);
    assert_eq!(records[4].reason, "torn_tail_completed");
    assert_eq!(records[4].data["line"], 4);
}

#[test]
fn buffered_events_reach_the_file_at_sync_and_at_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let options = LogOptions {
        durability: Durability::Buffered,
        flush_interval: std::time::Duration::from_millis(10),
        ..LogOptions::default()
    };
    let log = AuditLog::open(&path, options).unwrap();
    log.record(Event::fetch(
        Decision::Allow,
        "ok",
        "https://pkgs.example.test/",
    ))
    .unwrap();
    log.sync().unwrap();
    assert_eq!(
        verify(fs::read(&path).unwrap().as_slice(), None)
            .unwrap()
            .events,
        1,
        "sync writes buffered events"
    );
    log.record(Event::fetch(
        Decision::Allow,
        "ok",
        "https://pkgs.example.test/",
    ))
    .unwrap();
    drop(log);
    assert_eq!(
        verify(fs::read(&path).unwrap().as_slice(), None)
            .unwrap()
            .events,
        2,
        "drop writes buffered events"
    );
}

#[test]
fn buffered_events_reach_the_file_on_the_interval_without_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let options = LogOptions {
        durability: Durability::Buffered,
        flush_interval: std::time::Duration::from_millis(20),
        ..LogOptions::default()
    };
    let log = AuditLog::open(&path, options).unwrap();
    log.record(Event::fetch(
        Decision::Allow,
        "ok",
        "https://pkgs.example.test/",
    ))
    .unwrap();
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        0,
        "still buffered right after record"
    );
    // Wait for the flush thread's write itself, bounded at 10 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while fs::metadata(&path).unwrap().len() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the flush thread never wrote the buffered event"
        );
        std::thread::park_timeout(std::time::Duration::from_millis(2));
    }
    assert_eq!(
        verify(fs::read(&path).unwrap().as_slice(), None)
            .unwrap()
            .events,
        1
    );
    drop(log);
}

#[test]
fn only_a_regular_file_is_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let regular = dir.path().join("real.jsonl");
    fs::write(&regular, "").unwrap();
    let to_null = dir.path().join("to-null.jsonl");
    std::os::unix::fs::symlink("/dev/null", &to_null).unwrap();
    let to_regular = dir.path().join("to-real.jsonl");
    std::os::unix::fs::symlink(&regular, &to_regular).unwrap();
    let fifo = dir.path().join("fifo.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for (path, what) in [
        (to_null.as_path(), "a symbolic link"),
        (to_regular.as_path(), "a symbolic link"),
        (std::path::Path::new("/dev/null"), "a device"),
        (fifo.as_path(), "a FIFO"),
        (dir.path(), "a directory"),
    ] {
        let err = AuditLog::open(path, LogOptions::default()).err();
        assert!(
            matches!(&err, Some(Error::NotRegularFile { what: w, .. }) if *w == what),
            "{}: {err:?}",
            path.display()
        );
        assert!(err.unwrap().to_string().contains("not a regular file"));
    }
    assert!(AuditLog::open(&regular, LogOptions::default()).is_ok());
}

#[test]
fn an_event_too_large_for_a_line_is_refused_and_the_chain_does_not_move() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path, LogOptions::default()).unwrap();
    let huge = "x".repeat(agentguard_audit::MAX_LINE_BYTES);
    let err = log.record(event(0, 0).data("message", huge)).unwrap_err();
    assert!(matches!(err, Error::EventTooLarge { .. }), "{err:?}");
    assert_eq!(log.record(event(0, 1)).unwrap().seq, 0);
    drop(log);
    verify(fs::read(&path).unwrap().as_slice(), None).unwrap();
}

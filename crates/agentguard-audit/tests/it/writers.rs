//! Many writers on one log: before a handle continues the chain after lines another handle
//! appended, it verifies the head it continues from (canonical form, hash, signature, a number
//! past its own); what it cannot decide from the head it reads line by line.

use std::fs;
use std::path::Path;

use agentguard_audit::{
    Attempt, AuditLog, AuditSink, Decision, Error, Event, LogOptions, ProblemKind,
};

use crate::key;

fn event(i: u64) -> Event {
    Event::fetch(Decision::Allow, "ok", "https://pkgs.example.test/").data("i", i)
}

fn signed() -> LogOptions {
    LogOptions {
        key: Some(key()),
        ..LogOptions::default()
    }
}

/// A first handle with one line, then a second that appends two and closes; `edit` then
/// rewrites the file's text; returns the first handle's next append and the file after it.
fn after_another_writer(
    options: impl Fn() -> LogOptions,
    edit: impl Fn(&str) -> String,
) -> (Result<(), Error>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let first = AuditLog::open(&path, options()).unwrap();
    first.record(event(0)).unwrap();
    let second = AuditLog::open(&path, options()).unwrap();
    second.record(event(1)).unwrap();
    second.record(event(2)).unwrap();
    drop(second);
    let edited = edit(&fs::read_to_string(&path).unwrap());
    write_same_file(&path, &edited);
    let appended = first.record(event(3)).map(drop);
    (appended, edited, fs::read_to_string(&path).unwrap())
}

/// Rewrites the file in place (the handles keep their open file).
fn write_same_file(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

fn last_line_edited(text: &str, from: &str, to: &str) -> String {
    let cut = text[..text.len() - 1].rfind('\n').unwrap() + 1;
    format!("{}{}", &text[..cut], text[cut..].replacen(from, to, 1))
}

#[test]
fn the_head_another_writer_left_is_continued_after_it_verifies() {
    let (appended, _, after) = after_another_writer(LogOptions::default, str::to_owned);
    appended.unwrap();
    let summary = agentguard_audit::verify(after.as_bytes(), None).unwrap();
    assert_eq!((summary.events, summary.next_seq), (4, 4));
}

#[test]
fn an_edited_head_stops_the_next_append_and_nothing_is_written() {
    let (appended, edited, after) = after_another_writer(LogOptions::default, |text| {
        last_line_edited(text, "\"reason\":\"ok\"", "\"reason\":\"ko\"")
    });
    let err = appended.unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { problem, .. } if problem.kind == ProblemKind::BadHash && problem.line == 3),
        "{err}"
    );
    assert_eq!(after, edited, "nothing was appended");
}

#[test]
fn a_head_without_its_signature_stops_a_signed_log() {
    let (appended, edited, after) = after_another_writer(signed, |text| {
        let cut = text[..text.len() - 1].rfind('\n').unwrap() + 1;
        let head = &text[cut..];
        let hmac = head.find(",\"hmac\":").unwrap();
        format!("{}{}}}\n", &text[..cut], &head[..hmac])
    });
    let err = appended.unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { problem, .. } if problem.kind == ProblemKind::MissingSignature),
        "{err}"
    );
    assert_eq!(after, edited);
}

#[test]
fn a_head_numbered_before_this_writer_is_read_line_by_line_and_refused() {
    // The first line copied to the end: its number is not past this handle's.
    let (appended, edited, after) = after_another_writer(LogOptions::default, |text| {
        let first = &text[..=text.find('\n').unwrap()];
        format!("{text}{first}")
    });
    let err = appended.unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { problem, .. } if matches!(problem.kind, ProblemKind::BadSequence { .. })),
        "{err}"
    );
    assert_eq!(after, edited);
}

#[test]
fn a_torn_head_is_named_as_a_torn_tail() {
    let (appended, _, _) = after_another_writer(LogOptions::default, |text| {
        text[..text.len() - 5].to_owned()
    });
    let err = appended.unwrap_err();
    assert!(matches!(&err, Error::TornTail { .. }), "{err}");
}

/// What `try_record_now` did: the receipt's number, or the event handed back.
fn now(log: &impl AuditSink, event: Event) -> Result<u64, Event> {
    match log.try_record_now(event) {
        Attempt::Done(receipt) => Ok(receipt.unwrap().seq),
        Attempt::WouldWait(event) => Err(event),
    }
}

#[test]
fn an_event_is_recorded_at_once_only_while_nothing_else_holds_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path, LogOptions::default()).unwrap();
    // Another process's lease, as far as the file's lock is concerned.
    let other = fs::File::open(&path).unwrap();
    other.lock().unwrap();
    assert_eq!(now(&log, event(0)), Err(event(0)), "handed back, unchanged");
    other.unlock().unwrap();
    let first = now(&log, event(0)).expect("the lock is free: at once");
    // This handle holds the lease now: the next one needs no lock call at all.
    assert_eq!(now(&log, event(1)), Ok(first + 1));
    drop(log);
    let file = std::io::BufReader::new(fs::File::open(&path).unwrap());
    let summary = agentguard_audit::verify(file, None).unwrap();
    assert_eq!(summary.events, 2, "{summary:?}");
}

#[test]
fn in_fsync_mode_every_event_waits_for_the_blocking_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let options = LogOptions {
        durability: agentguard_audit::Durability::Fsync,
        ..LogOptions::default()
    };
    let log = AuditLog::open(&path, options).unwrap();
    assert_eq!(now(&log, event(0)), Err(event(0)));
    log.record(event(0)).unwrap();
    assert_eq!(
        now(&log, event(1)),
        Err(event(1)),
        "even with the lease held"
    );
    assert_eq!(fs::read_to_string(&path).unwrap().lines().count(), 1);
}

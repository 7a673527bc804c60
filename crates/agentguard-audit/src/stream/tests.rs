//! The stream sink and reader against each other: what one writes the other reads back
//! whole, and what a forger or another run writes is refused and counted.

use crate::{AuditSink, Decision, Event, Kind, StreamReader, StreamSink};

/// What a sink wrote, as lines.
fn lines_of(sink: StreamSink<Vec<u8>>) -> Vec<String> {
    String::from_utf8(sink.into_inner())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn connect(target: &str) -> Event {
    Event::egress_connect(Decision::Allow, "ok", target, "10.0.0.9:4000")
        .data("rule", "pkgs.example.com")
}

/// Two events and the end line of run `run`.
fn written(run: &str) -> Vec<String> {
    let sink = StreamSink::new(Vec::new(), run);
    assert_eq!(sink.record(connect("pkgs.example.com:443")).unwrap().seq, 0);
    let close = Event::egress_close("closed", "pkgs.example.com:443", "10.0.0.9:4000")
        .data("bytes_up", 10u64);
    assert_eq!(sink.record(close).unwrap().seq, 1);
    sink.end().unwrap();
    lines_of(sink)
}

fn read(run: &str, lines: &[String]) -> (Vec<Event>, StreamReader) {
    let mut reader = StreamReader::new(run);
    let events = lines
        .iter()
        .filter_map(|l| reader.line(l).event())
        .collect();
    (events, reader)
}

#[test]
fn what_a_sink_writes_a_reader_reads_back_whole() {
    let mut lines = vec!["listening on 0.0.0.0:3128".to_owned()];
    lines.extend(written("run-1"));
    let (events, reader) = read("run-1", &lines);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].kind, Kind::EgressConnect);
    assert_eq!(events[0].subject["run"], "run-1");
    assert_eq!(events[0].data["rule"], "pkgs.example.com");
    assert_eq!(events[1].kind, Kind::EgressClose);
    assert_eq!(events[1].data["bytes_up"], 10);
    assert!(reader.summary().complete(), "{:?}", reader.summary());
    assert_eq!(reader.summary().events, 2);
}

#[test]
fn foreign_forged_and_replayed_lines_are_refused_and_counted() {
    let mine = written("run-1");
    let theirs = written("run-2");
    let edit = |line: &str, change: &dyn Fn(&mut serde_json::Value)| {
        let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
        change(&mut value);
        value.to_string()
    };
    let forged_kind = edit(&mine[0], &|v| v["kind"] = "container_run".into());
    let extra_field = edit(&mine[0], &|v| v["hash"] = "00".into());
    let other_subject = edit(&mine[0], &|v| v["subject"]["run"] = "run-2".into());
    let mistyped = edit(&mine[1], &|v| v["data"]["bytes_up"] = "10".into());
    let lines = vec![
        mine[0].clone(),
        theirs[0].clone(),
        "an unrelated warning".to_owned(),
        forged_kind,
        extra_field,
        other_subject,
        mine[0].clone(),
        mistyped,
        mine[1].clone(),
        mine[2].clone(),
        mine[1].clone(),
    ];
    let (events, reader) = read("run-1", &lines);
    assert_eq!(events.len(), 2, "only the two real events");
    let summary = reader.summary();
    assert_eq!(summary.refused, 8, "{summary:?}");
    assert_eq!(summary.missing, 0);
    assert!(summary.ended);
    assert!(!summary.complete());
    let first = summary.first_refused.as_deref().unwrap();
    assert!(first.starts_with("a line of run \"run-2\""), "{first}");
}

#[test]
fn a_gap_in_the_numbers_and_a_missing_end_are_a_cut() {
    let lines = written("run-1");
    let (events, reader) = read("run-1", &[lines[1].clone(), lines[2].clone()]);
    assert_eq!(events.len(), 1);
    assert_eq!(reader.summary().missing, 1, "event 0 never came");
    assert!(!reader.summary().complete());
    let (_, reader) = read("run-1", &lines[..2]);
    assert!(!reader.summary().ended);
    assert_eq!(reader.summary().missing, 0);
    assert!(!reader.summary().complete(), "no end line: cut");
    // The end line says how many were written: the ones that never came are missing.
    let (_, reader) = read("run-1", &[lines[0].clone(), lines[2].clone()]);
    assert_eq!(reader.summary().missing, 1);
}

#[test]
fn a_mistyped_event_is_not_written() {
    let sink = StreamSink::new(Vec::new(), "run-1");
    let bad = connect("pkgs.example.com:443").data("bytes", "many");
    assert!(sink.record(bad).is_err());
    assert!(lines_of(sink).is_empty());
}

#[test]
fn a_note_is_shown_not_appended_and_a_foreign_one_is_refused() {
    let sink = StreamSink::new(Vec::new(), "run-1");
    sink.record(connect("pkgs.example.com:443")).unwrap();
    sink.note("closed tunnels still open after the 15 s grace period")
        .unwrap();
    sink.end().unwrap();
    let mut lines = lines_of(sink);
    lines.insert(
        1,
        crate::note_line("run-2", "not this run's")
            .trim_end()
            .to_owned(),
    );
    let mut reader = StreamReader::new("run-1");
    let reads: Vec<crate::Read> = lines.iter().map(|l| reader.line(l)).collect();
    assert!(matches!(reads[0], crate::Read::Event(_)), "{reads:?}");
    assert_eq!(reads[1], crate::Read::Skipped);
    assert_eq!(
        reads[2],
        crate::Read::Note("closed tunnels still open after the 15 s grace period".into())
    );
    let summary = reader.summary();
    // Notes are not numbered: the end line's count is the events'.
    assert_eq!(
        (summary.events, summary.refused, summary.missing),
        (1, 1, 0)
    );
    assert!(summary.ended);
}

//! Unit tests: the canonical form, timestamps, sealing and the in-memory sink.

use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::chain::{Chain, canonical};
use crate::time::rfc3339_millis;
use crate::*;

#[test]
fn canonical_form_sorts_keys_at_every_depth_without_whitespace() {
    let value = json!({"b": 1, "a": {"z": [1, {"y": "é\n", "x": null}], "c": true}, "A": -5});
    let mut out = String::new();
    canonical(&value, &mut out);
    assert_eq!(
        out,
        r#"{"A":-5,"a":{"c":true,"z":[1,{"x":null,"y":"é\n"}]},"b":1}"#
    );
}

#[test]
fn timestamps_are_rfc3339_utc_with_milliseconds() {
    let at = |secs: u64, millis: u64| {
        SystemTime::UNIX_EPOCH + Duration::from_millis(secs * 1000 + millis)
    };
    assert_eq!(rfc3339_millis(at(0, 0)), "1970-01-01T00:00:00.000Z");
    assert_eq!(
        rfc3339_millis(at(951_782_400, 7)),
        "2000-02-29T00:00:00.007Z"
    );
    assert_eq!(
        rfc3339_millis(at(1_795_996_799, 999)),
        "2026-11-29T23:59:59.999Z"
    );
    assert_eq!(
        rfc3339_millis(at(4_107_542_400, 0)),
        "2100-03-01T00:00:00.000Z"
    );
}

#[test]
fn a_sealed_line_has_the_documented_field_order_and_verifies() {
    let mut chain = Chain::new(None);
    let event = Event::container_run(Decision::Allow, "ok", "run_tests", "localhost/tools:latest")
        .data("exit_code", 0);
    let sealed = chain.seal(&event, SystemTime::UNIX_EPOCH).unwrap();
    assert!(sealed.line.starts_with(
        r#"{"v":1,"seq":0,"ts":"1970-01-01T00:00:00.000Z","kind":"container_run","decision":"allow","reason":"ok","subject":{"command":"run_tests","image":"localhost/tools:latest"},"data":{"exit_code":0},"prev":"0000"#
    ), "{}", sealed.line);
    assert!(sealed.line.ends_with("\"}\n"));
    assert_eq!(sealed.line.matches('\n').count(), 1, "exactly one line");
    let second = chain.seal(&event, SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(second.seq, 1);
    assert!(
        second
            .line
            .contains(&format!("\"prev\":\"{}\"", sealed.hash))
    );
    let both = format!("{}{}", sealed.line, second.line);
    let summary = verify(both.as_bytes(), None).unwrap();
    assert_eq!(
        (summary.events, summary.next_seq, summary.head.as_str()),
        (2, 2, second.hash.as_str())
    );
}

#[test]
fn strings_that_look_like_json_cannot_break_the_line() {
    let sink = MemorySink::default();
    let nasty = "a\"}\n{\"v\":1,\"seq\":99}\r\u{0}\u{2028}";
    sink.record(Event::fetch(Decision::Deny, "domain_not_allowed", nasty))
        .unwrap();
    let lines = sink.lines();
    assert_eq!(lines[0].matches('\n').count(), 1);
    assert_eq!(sink.records()[0].subject["url"], nasty);
    assert!(verify(lines.concat().as_bytes(), None).is_ok());
}

#[test]
fn memory_sink_signs_with_a_key_and_refuses_weak_keys() {
    assert!(matches!(
        Key::new(*b"short"),
        Err(Error::WeakKey { min: 16, len: 5 })
    ));
    let key = Key::new(*b"0123456789abcdef").unwrap();
    let sink = MemorySink::new(Some(key.clone()));
    sink.record(Event::egress_connect(
        Decision::Allow,
        "ok",
        "pkgs.example.com:443",
        "127.0.0.1:5000",
    ))
    .unwrap();
    let text = sink.lines().concat();
    assert!(sink.records()[0].hmac.is_some());
    let checked = verify(text.as_bytes(), Some(key)).unwrap();
    assert!(checked.signed && checked.signatures_checked);
    let wrong = Key::new(*b"fedcba9876543210").unwrap();
    assert_eq!(
        verify(text.as_bytes(), Some(wrong)).unwrap_err().1.kind,
        ProblemKind::BadSignature
    );
    let unchecked = verify(text.as_bytes(), None).unwrap();
    assert!(unchecked.signed && !unchecked.signatures_checked);
}

#[test]
fn key_debug_output_hides_the_key() {
    let key = Key::new(*b"0123456789abcdef").unwrap();
    assert_eq!(format!("{key:?}"), "Key(..)");
}

#[test]
fn the_memory_sink_refuses_a_known_key_of_the_wrong_type() {
    let sink = crate::MemorySink::default();
    let wrong = Event::new(Kind::EgressConnect, Decision::Allow, "ok").data("status", "200");
    let err = crate::AuditSink::record(&sink, wrong).unwrap_err();
    assert!(err.to_string().contains("`status`"), "{err}");
    let right = Event::new(Kind::EgressConnect, Decision::Allow, "ok")
        .data("status", 200)
        .data("exit_code", serde_json::Value::Null)
        .data("extension", "unknown keys are allowed");
    assert!(crate::AuditSink::record(&sink, right).is_ok());
    assert!(sink.lines().len() == 1);
}

/// `Kind::ALL` holds every kind once, each with the wire name serde writes and reads, so
/// `audit show --kind` offers every kind a log can hold.
#[test]
fn every_kind_is_listed_once_with_its_wire_name() {
    use crate::Kind;
    // A new variant fails to compile here until it is given a place in `ALL`.
    let place = |k: Kind| match k {
        Kind::ContainerRun => 0,
        Kind::Fetch => 1,
        Kind::EgressConnect => 2,
        Kind::EgressClose => 3,
        Kind::EgressRoute => 4,
        Kind::EgressStream => 5,
        Kind::LogRepaired => 6,
        Kind::McpCall => 7,
        Kind::IsolationReceipt => 8,
        Kind::PolicyLoaded => 9,
    };
    for (i, kind) in Kind::ALL.into_iter().enumerate() {
        assert_eq!(place(kind), i, "{kind}");
        let wire = serde_json::to_value(kind).unwrap();
        assert_eq!(wire, kind.as_str());
        assert_eq!(Kind::parse(kind.as_str()), Some(kind));
    }
    assert_eq!(Kind::parse("container-run"), None);
}

/// `audit show --since/--until` read times as records write them, and the shorter forms a
/// person types; each written timestamp parses back to its own instant.
#[test]
fn times_parse_back_to_the_instant_they_name() {
    use crate::parse_millis;
    use std::time::{Duration, SystemTime};
    for millis in [0u64, 951_782_400_123, 1_764_403_200_999, 4_102_444_799_000] {
        let time = SystemTime::UNIX_EPOCH + Duration::from_millis(millis);
        let text = crate::time::rfc3339_millis(time);
        assert_eq!(parse_millis(&text), Some(millis as i64), "{text}");
    }
    let at = |s: &str| parse_millis(s).unwrap_or_else(|| panic!("{s}"));
    assert_eq!(at("2026-11-29"), at("2026-11-29T00:00:00.000Z"));
    assert_eq!(at("2026-11-29T09:30"), at("2026-11-29T09:30:00Z"));
    assert_eq!(at("2026-11-29T10:30:00+01:00"), at("2026-11-29T09:30:00Z"));
    assert_eq!(
        at("2026-11-29T09:30:00.5Z") - at("2026-11-29T09:30:00Z"),
        500
    );
    assert_eq!(at("2024-02-29") + 86_400_000, at("2024-03-01"));
    for bad in [
        "",
        "2026-13-01",
        "2026-02-30",
        "2026-11-29T25:00",
        "yesterday",
        "2026-11-29T09:30:00.Z",
        "2026-11-29X",
    ] {
        assert_eq!(parse_millis(bad), None, "{bad}");
    }
}

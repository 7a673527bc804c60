//! Every kind of tampering is detected and named, with the first bad line.

use std::fs;

use agentguard_audit::{GENESIS, ProblemKind, verify};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{key, write_log};

fn lines(n: u64, signed: bool) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_log(&path, n, signed.then(key));
    fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect()
}

fn check(lines: &[String], signed: bool) -> Result<u64, (u64, ProblemKind)> {
    verify(lines.concat().as_bytes(), signed.then(key))
        .map(|s| s.events)
        .map_err(|(_, p)| (p.line, p.kind))
}

/// Recomputes hashes and prevs from `from` (0-based) on, as an attacker without the key can:
/// an independent implementation of the canonical form (serde_json's sorted map) and SHA-256.
fn rechain(lines: &mut [String], from: usize, drop_hmac: bool) {
    let mut prev = if from == 0 {
        GENESIS.to_owned()
    } else {
        serde_json::from_str::<Value>(&lines[from - 1]).unwrap()["hash"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for line in &mut lines[from..] {
        let mut value: Value = serde_json::from_str(line).unwrap();
        let object = value.as_object_mut().unwrap();
        object.remove("hash");
        let hmac = object.remove("hmac");
        object.insert("prev".into(), prev.clone().into());
        let hash: String = Sha256::digest(value.to_string().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        // Written back in the writer's own layout, as a capable attacker would: fields in
        // reading order, compact, nested objects sorted.
        let mut text: Vec<String> = [
            "v", "seq", "ts", "kind", "decision", "reason", "subject", "data", "prev",
        ]
        .iter()
        .map(|k| format!("\"{k}\":{}", value[*k]))
        .collect();
        text.push(format!("\"hash\":\"{hash}\""));
        if let (Some(h), false) = (hmac, drop_hmac) {
            text.push(format!("\"hmac\":{h}"));
        }
        *line = format!("{{{}}}\n", text.join(","));
        prev = hash;
    }
}

#[test]
fn an_intact_log_verifies() {
    assert_eq!(check(&lines(5, false), false), Ok(5));
    assert_eq!(check(&lines(5, true), true), Ok(5));
    assert_eq!(check(&[], false), Ok(0), "an empty log is intact");
}

#[test]
fn editing_a_value_is_a_bad_hash() {
    let mut log = lines(5, false);
    log[2] = log[2].replace("\"reason\":\"ok\"", "\"reason\":\"ko\"");
    assert_eq!(check(&log, false), Err((3, ProblemKind::BadHash)));
    let mut log = lines(5, false);
    log[3] = log[3].replace("\"decision\":\"allow\"", "\"decision\":\"deny\"");
    assert_eq!(check(&log, false), Err((4, ProblemKind::BadHash)));
}

#[test]
fn deleting_a_line_breaks_the_sequence() {
    let mut log = lines(5, false);
    log.remove(2);
    assert_eq!(
        check(&log, false),
        Err((
            3,
            ProblemKind::BadSequence {
                expected: 2,
                found: 3
            }
        ))
    );
    let mut first = lines(5, false);
    first.remove(0);
    assert_eq!(
        check(&first, false),
        Err((
            1,
            ProblemKind::BadSequence {
                expected: 0,
                found: 1
            }
        ))
    );
}

#[test]
fn swapping_two_lines_breaks_the_sequence() {
    let mut log = lines(5, false);
    log.swap(1, 2);
    assert_eq!(
        check(&log, false),
        Err((
            2,
            ProblemKind::BadSequence {
                expected: 1,
                found: 2
            }
        ))
    );
}

#[test]
fn inserting_a_line_is_detected() {
    // A copy of an earlier line.
    let mut copy = lines(5, false);
    let dup = copy[1].clone();
    copy.insert(2, dup);
    assert_eq!(
        check(&copy, false),
        Err((
            3,
            ProblemKind::BadSequence {
                expected: 2,
                found: 1
            }
        ))
    );
    // A forged line with the right sequence number and a valid hash, but not chained.
    let mut forged = lines(5, false);
    let mut line = forged[2].clone();
    rechain(std::slice::from_mut(&mut line), 0, true);
    forged[2] = line;
    assert_eq!(check(&forged, false), Err((3, ProblemKind::BrokenChain)));
}

#[test]
fn truncating_mid_line_is_a_torn_tail() {
    let mut log = lines(5, false);
    let last = log.pop().unwrap();
    log.push(last[..last.len() / 2].to_owned());
    assert_eq!(check(&log, false), Err((5, ProblemKind::TornTail)));
    let mut no_newline = lines(3, false);
    let last = no_newline.pop().unwrap();
    no_newline.push(last.trim_end().to_owned());
    assert_eq!(check(&no_newline, false), Err((3, ProblemKind::TornTail)));
}

#[test]
fn garbage_is_bad_json_and_foreign_objects_are_not_records() {
    let mut log = lines(3, false);
    log.insert(1, "not json\n".into());
    assert!(matches!(
        check(&log, false),
        Err((2, ProblemKind::BadJson(_)))
    ));
    let foreign = vec!["{\"hello\":\"world\",\"hash\":\"00\"}\n".to_owned()];
    assert!(matches!(
        check(&foreign, false),
        Err((1, ProblemKind::BadRecord(_)))
    ));
}

#[test]
fn recomputing_the_chain_without_the_key_is_detected_with_the_key() {
    let mut log = lines(5, true);
    log[1] = log[1].replace("\"reason\":\"ok\"", "\"reason\":\"ko\"");
    rechain(&mut log, 1, false);
    assert_eq!(
        check(&log, true),
        Err((2, ProblemKind::BadSignature)),
        "stale HMACs"
    );
    let mut dropped = lines(5, true);
    dropped[1] = dropped[1].replace("\"reason\":\"ok\"", "\"reason\":\"ko\"");
    rechain(&mut dropped, 1, true);
    assert_eq!(
        check(&dropped, true),
        Err((2, ProblemKind::MissingSignature)),
        "HMACs removed"
    );
    // The limit, stated in docs/audit.md: without a key, a whole rewritten chain verifies.
    let mut unsigned = lines(5, false);
    unsigned[1] = unsigned[1].replace("\"reason\":\"ok\"", "\"reason\":\"ko\"");
    rechain(&mut unsigned, 1, true);
    assert_eq!(check(&unsigned, false), Ok(5));
}

#[test]
fn the_independent_canonical_form_matches_the_writer() {
    // rechain() hashes with serde_json's sorted map; applied to an untouched log it must
    // reproduce every hash, or the tests above would prove nothing.
    let original = lines(4, false);
    let mut copy = original.clone();
    rechain(&mut copy, 0, true);
    let hashes = |ls: &[String]| -> Vec<Value> {
        ls.iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["hash"].clone())
            .collect()
    };
    assert_eq!(hashes(&copy), hashes(&original));
}

#[test]
fn only_the_writers_exact_serialization_is_accepted() {
    let original = lines(3, false);
    let second = &original[1];
    // Each variant carries the same record (same hash), but not in the writer's bytes.
    let variants = [
        (
            "a duplicate key",
            second.replacen("{\"v\":1,", "{\"v\":1,\"v\":1,", 1),
        ),
        (
            "reordered keys",
            second.replacen("{\"v\":1,\"seq\":1,", "{\"seq\":1,\"v\":1,", 1),
        ),
        (
            "a non-canonical escape",
            second.replacen("\"reason\":\"ok\"", "\"reason\":\"\\u006fk\"", 1),
        ),
        (
            "extra whitespace",
            second.replacen("\"seq\":1,", "\"seq\": 1,", 1),
        ),
        ("a trailing space", second.replacen("}\n", "} \n", 1)),
    ];
    for (what, variant) in variants {
        assert_ne!(&variant, second, "{what}: the variant differs");
        let mut log = original.clone();
        log[1] = variant;
        assert_eq!(
            check(&log, false),
            Err((2, ProblemKind::NotCanonical)),
            "{what}"
        );
    }
}

/// Counts the bytes a reader hands out.
struct Counting<R> {
    inner: R,
    read: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

#[test]
fn an_endless_line_is_refused_without_reading_it_whole() {
    let read = std::rc::Rc::new(std::cell::Cell::new(0));
    let mut log = lines(1, false).concat().into_bytes();
    log.push(b'{');
    let endless = std::io::Read::chain(&log[..], std::io::repeat(b'x'));
    let reader = std::io::BufReader::new(Counting {
        inner: endless,
        read: read.clone(),
    });
    let (summary, problem) = verify(reader, None).unwrap_err();
    assert_eq!(summary.events, 1);
    assert_eq!(
        (problem.line, problem.kind),
        (
            2,
            ProblemKind::LineTooLong {
                limit: agentguard_audit::MAX_LINE_BYTES
            }
        )
    );
    assert!(
        read.get() < (agentguard_audit::MAX_LINE_BYTES as u64) * 2,
        "read {} bytes of an endless line",
        read.get()
    );
}

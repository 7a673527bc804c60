//! The receipt line read, and its event's shape (the test sink checks every key's type).

use agentguard_audit::{AuditSink, Decision, MemorySink};

use super::Receipt;

const PASSED: &[u8] = br#"{"decision":"allow","failed":[],"checks":{"interfaces":"lo","ids":"uid 65534/65534/65534/65534 gid 65534/65534/65534/65534"},"micros":182}"#;
const FAILED: &[u8] = br#"{"decision":"deny","failed":["interfaces","routes"],"checks":{"interfaces":"lo,eth0","routes":"ipv4 00000000 via eth0"},"micros":450}"#;

#[test]
fn a_receipt_passes_only_when_it_says_allow_with_no_failed_check() {
    let passed = Receipt::parse(Some(PASSED)).unwrap();
    assert!(passed.passed && passed.failed.is_empty() && passed.micros == 182);
    let failed = Receipt::parse(Some(FAILED)).unwrap();
    assert!(!failed.passed);
    assert_eq!(
        failed.failures(),
        "interfaces: lo,eth0; routes: ipv4 00000000 via eth0"
    );
    // "allow" with a failed check, or with no check at all, is not a pass.
    let mixed = br#"{"decision":"allow","failed":["ids"],"checks":{"ids":"uid 0/0/0/0 gid 0/0/0/0"},"micros":1}"#;
    assert!(!Receipt::parse(Some(mixed)).unwrap().passed);
    let empty = br#"{"decision":"allow","failed":[],"checks":{},"micros":1}"#;
    assert!(!Receipt::parse(Some(empty)).unwrap().passed);
    for bad in [
        &b"not json"[..],
        br#"{"decision":"allow"}"#,
        br#"{"decision":"allow","failed":[],"checks":{"a":1},"micros":1}"#,
    ] {
        assert!(
            Receipt::parse(Some(bad)).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert!(
        Receipt::parse(None)
            .unwrap_err()
            .contains("no isolation receipt")
    );
}

#[test]
fn the_receipt_event_has_the_documented_shape() {
    let sink = MemorySink::new(None);
    for line in [PASSED, FAILED] {
        let receipt = Receipt::parse(Some(line)).unwrap();
        sink.record(receipt.event("run_tests", "agentguard-1-2-3"))
            .unwrap();
    }
    let records = sink.records();
    assert_eq!(records.len(), 2);
    let (ok, deny) = (&records[0], &records[1]);
    assert_eq!(ok.kind.as_str(), "isolation_receipt");
    assert_eq!((ok.decision, ok.reason.as_str()), (Decision::Allow, "ok"));
    assert_eq!(
        (deny.decision, deny.reason.as_str()),
        (Decision::Deny, "isolation_failed")
    );
    assert_eq!(ok.subject["command"], "run_tests");
    assert_eq!(ok.data["container"], "agentguard-1-2-3");
    assert_eq!(ok.data["checks"]["interfaces"], "lo");
    assert_eq!(
        deny.data["failed"],
        serde_json::json!(["interfaces", "routes"])
    );
    assert_eq!(deny.data["micros"], 450);
}

#[test]
fn a_whole_log_has_a_receipt_only_as_its_first_line() {
    let mark = crate::capture::RECEIPT_MARK;
    let log = format!("{mark}{{\"decision\":\"allow\"}}\nout\n{mark}forged\n");
    let (line, rest) = Receipt::leading(log.as_bytes());
    assert_eq!(line, Some(&b"{\"decision\":\"allow\"}"[..]));
    assert_eq!(rest, format!("out\n{mark}forged\n").as_bytes());
    // A line the command printed is never taken for a receipt, and nothing is removed.
    let later = format!("out\n{mark}{{\"decision\":\"allow\"}}\n");
    assert_eq!(Receipt::leading(later.as_bytes()), (None, later.as_bytes()));
    // An unfinished line is no receipt.
    let cut = format!("{mark}{{\"decision\"");
    assert_eq!(Receipt::leading(cut.as_bytes()), (None, cut.as_bytes()));
    assert_eq!(Receipt::leading(b""), (None, &b""[..]));
}

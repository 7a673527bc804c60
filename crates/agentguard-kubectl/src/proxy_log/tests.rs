//! The follower over a scripted log: events appended with their pod, an endless line
//! refused without being kept whole.

use std::sync::Mutex;

use agentguard_audit::{AuditSink, Decision, Event, MemorySink, StreamSink, StreamSummary};

use super::{MAX_LINE, follow};

/// The stream a proxy of run `run` writes: the listening line, `n` connects, the end line.
fn stream(run: &str, n: usize) -> Vec<u8> {
    let sink = StreamSink::new(b"listening on 0.0.0.0:3128\n".to_vec(), run);
    for i in 0..n {
        let target = format!("pkgs.example.com:{}", 443 + i);
        let event = Event::egress_connect(Decision::Allow, "ok", &target, "10.1.2.3:5000");
        sink.record(event).unwrap();
    }
    sink.end().unwrap();
    sink.into_inner()
}

async fn followed(log: &[u8]) -> (MemorySink, StreamSummary) {
    let sink = MemorySink::default();
    let summary = Mutex::new(StreamSummary::default());
    follow(log, "run-1", "run-1-proxy-abc", &sink, &summary)
        .await
        .unwrap();
    let summary = summary.into_inner().unwrap();
    (sink, summary)
}

#[tokio::test]
async fn each_event_is_appended_marked_with_its_pod() {
    let (sink, summary) = followed(&stream("run-1", 3)).await;
    let records = sink.records();
    assert_eq!(records.len(), 3);
    for record in &records {
        assert_eq!(record.data["pod"], "run-1-proxy-abc");
        assert_eq!(record.subject["run"], "run-1");
    }
    assert_eq!(records[2].subject["target"], "pkgs.example.com:445");
    assert!(summary.complete(), "{summary:?}");
}

#[tokio::test]
async fn an_endless_line_is_refused_without_being_kept_whole() {
    let whole = stream("run-1", 1);
    // The long line goes just before the end line.
    let cut = whole[..whole.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    let mut log = whole[..cut].to_vec();
    log.extend(std::iter::repeat_n(b'{', MAX_LINE * 3));
    log.push(b'\n');
    log.extend_from_slice(&whole[cut..]);
    let (sink, summary) = followed(&log).await;
    assert_eq!(sink.records().len(), 1);
    assert_eq!(summary.refused, 1, "{summary:?}");
    assert!(summary.ended);
    let first = summary.first_refused.unwrap();
    assert!(first.len() < 2 * MAX_LINE, "kept {} bytes", first.len());
}

#[tokio::test]
async fn a_log_that_stops_mid_stream_is_a_cut() {
    let log = stream("run-1", 2);
    let without_end = &log[..log.len() - 1];
    let cut = without_end.iter().rposition(|b| *b == b'\n').unwrap() + 1;
    let (sink, summary) = followed(&log[..cut]).await;
    assert_eq!(sink.records().len(), 2);
    assert!(summary.cut(), "{summary:?}");
    let event = summary.event("run-1-proxy-abc");
    assert_eq!(event.reason, "stream_cut");
    assert_eq!(event.data["events"], 2);
}

//! An egress run's proxy decisions, back through its pod's log: kmock serves the proxy pod's
//! log as `kubectl logs --follow` reads it, with lines the real writer
//! ([`agentguard_audit::StreamSink`]) made, and the run's sink must hold exactly the events of
//! this run, each marked with its pod, closed by the `egress_stream` event that says how the
//! stream came back.

use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{AuditSink, Decision, Event, Kind, MemorySink, Record, StreamSink};
use agentguard_container::RunStatus;
use agentguard_k8s::proxy_name;
use agentguard_kubectl::{Ran, run};
use serde_json::{Value, json};

use super::{ALL, Cluster, RUN, egress, kubectl_for, request, settings, spec};

/// The lines a proxy of run `run` writes for `n` allowed connects and then its end line.
fn proxy_lines(run: &str, n: u16) -> Vec<String> {
    let sink = StreamSink::new(Vec::new(), run);
    for i in 0..n {
        let target = format!("pkgs.example.com:{}", 8000 + i);
        let event = Event::egress_connect(Decision::Allow, "ok", &target, "10.1.2.3:40000");
        sink.record(event).unwrap();
    }
    sink.end().unwrap();
    let text = String::from_utf8(sink.into_inner()).unwrap();
    text.lines().map(str::to_owned).collect()
}

/// Runs an egress command against a cluster playing `scenario` (the proxy's log in it);
/// returns how it ran and what its sink holds.
async fn egress_run(what: &str, scenario: Value) -> Option<(Ran, Vec<Record>)> {
    let cluster = Cluster::start(what, &scenario.to_string())?;
    let spec = spec(Duration::from_secs(30), 4096);
    let labels = [];
    let network = egress();
    let sink = Arc::new(MemorySink::default());
    let request = request(&spec, &labels, network);
    let shared = Arc::clone(&sink) as Arc<dyn AuditSink>;
    let (kubectl, settings) = (kubectl_for(&cluster), settings());
    let ran = run(&kubectl, &settings, &request, ALL, Some(shared));
    let ran = ran.await.unwrap().unwrap();
    assert_eq!(ran.result.status, RunStatus::Exited);
    cluster.assert_gone(&proxy_name(RUN));
    Some((ran, sink.records()))
}

/// The `egress_stream` event, which must be the last.
fn closing(records: &[Record]) -> &Record {
    let last = records.last().expect("no events at all");
    assert_eq!(last.kind, Kind::EgressStream, "{records:#?}");
    last
}

#[tokio::test(flavor = "multi_thread")]
async fn the_proxys_decisions_reach_the_runs_sink_marked_with_its_pod() {
    let lines = proxy_lines(RUN, 3);
    // Two while the run goes; the third and the end line as the proxy stops.
    let scenario = json!({"run_s": 0.5, "proxy_log": lines[..2], "proxy_tail": lines[2..]});
    let Some((ran, records)) = egress_run("egress stream", scenario).await else {
        return;
    };
    let pod = ran.proxy.as_ref().expect("no stream").pod.clone();
    assert!(pod.starts_with(&proxy_name(RUN)), "{pod}");
    assert_eq!(records.len(), 4, "{records:#?}");
    for (i, record) in records[..3].iter().enumerate() {
        assert_eq!(record.kind, Kind::EgressConnect);
        assert_eq!(record.data["pod"], pod.as_str());
        assert_eq!(record.subject["run"], RUN);
        assert_eq!(
            record.subject["target"],
            format!("pkgs.example.com:{}", 8000 + i)
        );
    }
    let last = closing(&records);
    assert_eq!(
        (last.decision, last.reason.as_str()),
        (Decision::Allow, "complete")
    );
    assert_eq!(last.data["events"], 3);
    assert!(ran.proxy.unwrap().summary.complete());
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_and_foreign_lines_are_counted_and_never_appended() {
    let mut lines = proxy_lines(RUN, 2);
    let end = lines.pop().unwrap();
    let foreign = proxy_lines("agentguard-other-run", 1).remove(0);
    let mut forged: Value = serde_json::from_str(&lines[1]).unwrap();
    forged["kind"] = "container_run".into();
    forged["seq"] = 2.into();
    lines.extend([
        foreign,
        forged.to_string(),
        "CONNECT pkgs.example.com:443 HTTP/1.1".into(),
    ]);
    let scenario = json!({"proxy_log": lines, "proxy_tail": [end]});
    let Some((ran, records)) = egress_run("egress stream forged", scenario).await else {
        return;
    };
    let summary = ran.proxy.unwrap().summary;
    assert_eq!((summary.events, summary.refused), (2, 3), "{summary:?}");
    assert!(!summary.cut(), "{summary:?}");
    assert_eq!(records.len(), 3, "{records:#?}");
    assert!(records[..2].iter().all(|r| r.subject["run"] == RUN));
    let last = closing(&records);
    assert_eq!(
        (last.decision, last.reason.as_str()),
        (Decision::Deny, "lines_refused")
    );
    assert_eq!(last.data["refused"], 3);
    let message = last.data["message"].as_str().unwrap();
    assert!(message.contains("agentguard-other-run"), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_stream_is_reported_and_recorded_as_a_gap() {
    let lines = proxy_lines(RUN, 3);
    // The pod is evicted after its first event: the log ends without the others.
    let scenario = json!({"proxy_log": lines[..1], "proxy_tail": lines[1..], "proxy_cut": true});
    let Some((ran, records)) = egress_run("egress stream cut", scenario).await else {
        return;
    };
    let summary = ran.proxy.unwrap().summary;
    assert!(summary.cut() && !summary.ended, "{summary:?}");
    assert_eq!(summary.events, 1);
    assert_eq!(records.len(), 2, "{records:#?}");
    let last = closing(&records);
    assert_eq!(
        (last.decision, last.reason.as_str()),
        (Decision::Error, "stream_cut")
    );
    assert!(summary.problem().unwrap().contains("without its end line"));
}

//! Every call leaves its trace: a container started for a call that was cancelled or stopped
//! has its `container_run` event before the call's `mcp_call`; a call waiting for a slot is
//! answered `busy` only after its timeout, `cancelled` or `shutting_down` otherwise; a call
//! whose event cannot be recorded is refused, never served without a trace.

use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{AuditSink, Decision, Event, Kind, MemorySink, Receipt, Record};
use agentguard_mcp::{McpServer, ToolSet};
use agentguard_sandbox::Sandbox;
use agentguard_test_support::FakeEngine;

use crate::{Era, Fixture, call, object, spec};

/// Waits (bounded, 10 s) for `probe` to hold.
async fn eventually(what: &str, mut probe: impl FnMut() -> bool) {
    let limit = Duration::from_secs(10);
    agentguard_test_support::eventually(what, limit, || probe().then_some(())).await;
}

fn of_kind(records: &[Record], kind: Kind) -> Vec<&Record> {
    records.iter().filter(|r| r.kind == kind).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_call_records_its_container_run_before_its_mcp_call() {
    for era in crate::ERAS {
        let fixture = Fixture::new(60, false, 2);
        let client = fixture.connect(era).await;
        let pending = tokio::spawn({
            let peer = client.peer().clone();
            async move { peer.call_tool(call("sleepy", None)).await }
        });
        eventually("the run started", || !fixture.engine.running().is_empty()).await;
        pending.abort();
        eventually("the mcp_call is recorded", || {
            !of_kind(&fixture.audit.records(), Kind::McpCall).is_empty()
        })
        .await;
        let records = fixture.audit.records();
        let runs = of_kind(&records, Kind::ContainerRun);
        let calls = of_kind(&records, Kind::McpCall);
        assert_eq!((runs.len(), calls.len()), (1, 1), "{era:?}: {records:?}");
        assert_eq!(
            (runs[0].decision, runs[0].reason.as_str()),
            (Decision::Error, "cancelled")
        );
        assert_eq!(runs[0].data["container"], calls[0].data["container"]);
        assert!(runs[0].seq < calls[0].seq, "{era:?}: the run first");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_call_records_its_container_run_and_a_waiting_one_is_shutting_down() {
    let fixture = Fixture::new(60, false, 1);
    let client = fixture.connect(Era::Modern).await;
    let running = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(call("sleepy", None)).await }
    });
    eventually("the run started", || !fixture.engine.running().is_empty()).await;
    // The only slot is taken: this call waits for it.
    let waiting = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(call("ok", None)).await }
    });
    // No event says a call is waiting for a slot: give it the time to reach the wait (if it
    // has not, the stop refuses it the same way).
    tokio::time::sleep(Duration::from_millis(200)).await;
    fixture.server.stop_token().cancel();
    let running = object(&running.await.unwrap().unwrap());
    let waiting = object(&waiting.await.unwrap().unwrap());
    assert_eq!(running["reason"], "shutting_down", "{running}");
    assert_eq!(waiting["reason"], "shutting_down", "not busy: {waiting}");
    let records = fixture.audit.records();
    let runs = of_kind(&records, Kind::ContainerRun);
    assert_eq!(runs.len(), 1, "only one container was started: {records:?}");
    assert_eq!(runs[0].reason, "shutting_down");
    let call_of_run = of_kind(&records, Kind::McpCall)
        .into_iter()
        .find(|r| r.data.get("container") == Some(&runs[0].data["container"]))
        .expect("the running call's mcp_call");
    assert!(runs[0].seq < call_of_run.seq);
    assert_eq!(
        of_kind(&records, Kind::McpCall).len(),
        2,
        "both calls are recorded: {records:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_cancelled_while_it_waits_for_a_slot_is_cancelled_not_busy() {
    let fixture = Fixture::new(60, false, 1);
    let client = fixture.connect(Era::Legacy).await;
    let _running = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(call("sleepy", None)).await }
    });
    eventually("the run started", || !fixture.engine.running().is_empty()).await;
    let waiting = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(call("ok", None)).await }
    });
    // No event says a call is waiting for a slot: give it the time to reach the wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    waiting.abort();
    eventually("the waiting call is recorded", || {
        of_kind(&fixture.audit.records(), Kind::McpCall)
            .iter()
            .any(|r| r.subject["tool"] == "ok")
    })
    .await;
    let records = fixture.audit.records();
    let waited = of_kind(&records, Kind::McpCall)
        .into_iter()
        .find(|r| r.subject["tool"] == "ok")
        .unwrap();
    assert_eq!(waited.reason, "cancelled", "{records:?}");
    assert!(
        waited.data.get("container").is_none(),
        "nothing was started"
    );
    fixture.server.stop_token().cancel();
}

/// A sink that records everything but `mcp_call` events, which it refuses.
#[derive(Default)]
struct NoCallEvents(MemorySink);

impl AuditSink for NoCallEvents {
    fn record(&self, event: Event) -> agentguard_audit::Result<Receipt> {
        if event.kind == Kind::McpCall {
            return Err(agentguard_audit::Error::EventTooLarge {
                bytes: 70_000,
                limit: agentguard_audit::MAX_LINE_BYTES,
            });
        }
        self.0.record(event)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_whose_event_cannot_be_recorded_is_refused() {
    let engine = FakeEngine::new();
    let audit = Arc::new(NoCallEvents::default());
    let sandbox = Sandbox::builder(spec(&engine, 60, false))
        .audit(Arc::clone(&audit) as Arc<dyn AuditSink>)
        .build()
        .unwrap();
    let tools = ToolSet::new(&sandbox, &Default::default(), None).unwrap();
    let server = McpServer::builder(sandbox, tools)
        .audit(Arc::clone(&audit) as Arc<dyn AuditSink>)
        .build()
        .unwrap();
    let fixture = Fixture {
        engine,
        audit: Arc::new(MemorySink::default()),
        server,
    };
    let client = fixture.connect(Era::Modern).await;
    for (name, arguments) in [("ok", None), ("ok", Some(serde_json::json!({"x": 1})))] {
        let result = client.call_tool(call(name, arguments)).await.unwrap();
        let value = object(&result);
        assert_eq!(result.is_error, Some(true), "{value}");
        assert_eq!(value["reason"], "audit_failed", "{value}");
        assert!(
            value.get("stdout").is_none(),
            "the result is withheld: {value}"
        );
    }
}

//! Progress, cancellation, concurrency and the stop, in both eras.

use std::time::Duration;

use agentguard_audit::Kind;
use rmcp::model::{NumberOrString, ProgressToken, RequestMetaObject};

use agentguard_test_support::eventually;

use crate::{ERAS, Fixture, call, object};

/// Waits (bounded) until the fake engine runs `n` containers.
async fn until_running(fixture: &Fixture, n: usize) {
    let what = format!("{n} runs started");
    eventually(&what, Duration::from_secs(5), || {
        (fixture.engine.running().len() >= n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_with_a_progress_token_gets_progress_before_its_result() {
    for era in ERAS {
        let fixture = Fixture::new(60, false, 2);
        let client = fixture.connect(era).await;
        let mut params = call("second", None);
        let mut meta = RequestMetaObject::default();
        meta.set_progress_token(ProgressToken(NumberOrString::Number(7)));
        params.meta = Some(meta);
        let result = client.call_tool(params).await.unwrap();
        assert_eq!(object(&result)["status"], "exited");
        let progress = client.service().progress.lock().unwrap().clone();
        assert!(
            !progress.is_empty(),
            "{era:?}: no progress for a 1 s run reported every 100 ms"
        );
        assert!(
            progress.windows(2).all(|w| w[0].progress < w[1].progress),
            "{era:?}: increasing"
        );
        for p in &progress {
            // The client may put its own token in the request; every notification carries it.
            assert_eq!(p.progress_token, progress[0].progress_token);
            assert_eq!(p.total, Some(60.0));
            let message = p.message.as_deref().unwrap();
            assert!(
                message.starts_with("second: running ") && message.ends_with("bytes of output"),
                "{message}"
            );
        }
        // (rmcp's client puts a token in every call; the raw wire test in the CLI shows that
        // a call without one gets no progress.)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_call_kills_its_container_and_is_audited() {
    for era in ERAS {
        let fixture = Fixture::new(60, false, 2);
        let client = fixture.connect(era).await;
        let pending = tokio::spawn({
            let peer = client.peer().clone();
            async move { peer.call_tool(call("sleepy", None)).await }
        });
        until_running(&fixture, 1).await;
        // Dropping the request sends notifications/cancelled.
        pending.abort();
        eventually("the container is gone", Duration::from_secs(5), || {
            fixture.engine.running().is_empty().then_some(())
        })
        .await;
        assert!(
            fixture
                .engine
                .events()
                .iter()
                .any(|e| e.starts_with("killed")),
            "{era:?}"
        );
        let cancelled = eventually("the cancelled call's event", Duration::from_secs(2), || {
            fixture
                .audit
                .records()
                .into_iter()
                .find(|r| r.kind == Kind::McpCall && r.reason == "cancelled")
        })
        .await;
        assert_eq!(
            cancelled.decision,
            agentguard_audit::Decision::Error,
            "{era:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_run_concurrently_up_to_the_bound() {
    for (bound, most) in [(2, 2), (1, 1)] {
        let fixture = Fixture::new(60, false, bound);
        let client = fixture.connect(crate::Era::Modern).await;
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let peer = client.peer().clone();
                tokio::spawn(async move { peer.call_tool(call("second", None)).await })
            })
            .collect();
        let mut seen = 0;
        while calls.iter().any(|c| !c.is_finished()) {
            seen = seen.max(fixture.engine.running().len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for c in calls {
            assert_eq!(object(&c.await.unwrap().unwrap())["status"], "exited");
        }
        assert_eq!(seen, most, "with --max-concurrent {bound}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stop_ends_every_run_and_the_server() {
    let fixture = Fixture::new(60, false, 2);
    let client = fixture.connect(crate::Era::Legacy).await;
    let pending = tokio::spawn({
        let peer = client.peer().clone();
        async move { peer.call_tool(call("sleepy", None)).await }
    });
    until_running(&fixture, 1).await;
    fixture.server.stop_token().cancel();
    let result = pending.await.unwrap().unwrap();
    let value = object(&result);
    assert_eq!(
        (value["reason"].as_str(), result.is_error),
        (Some("shutting_down"), Some(true))
    );
    assert!(fixture.engine.running().is_empty());
    let after = tokio::time::timeout(Duration::from_secs(10), client.list_all_tools()).await;
    assert!(
        matches!(after, Ok(Err(_))),
        "the server closed the connection: {after:?}"
    );
}

//! The isolation receipt on a cluster: the relay's first line of the pod's log (kmock writes
//! what the relay would when the run container's command is the relay) is taken off the
//! output and kept with the run; a failed, garbled or missing one refuses the run.

use std::time::Duration;

use agentguard_kubectl::Error;
use serde_json::json;

use super::{RUN, run_in};

#[tokio::test]
async fn a_passing_receipt_is_kept_and_taken_off_the_output() {
    let scenario = json!({"logs": "1 passed\n"});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(30), 4096).await else {
        return;
    };
    let ran = ran.unwrap();
    assert_eq!(ran.result.stdout, b"1 passed\n");
    let receipt = ran.receipt.expect("a receipt");
    assert!(receipt.passed, "{receipt:?}");
    assert_eq!(
        receipt.checks["ids"],
        "uid 65534/65534/65534/65534 gid 65534/65534/65534/65534"
    );
    assert!(
        receipt.checks["interfaces"].contains("not required"),
        "{receipt:?}"
    );
    cluster.assert_gone(RUN);
}

#[tokio::test]
async fn a_failed_receipt_refuses_the_run_naming_the_check() {
    let scenario = json!({"receipt": "fail", "exit_code": 125});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(30), 4096).await else {
        return;
    };
    let error = ran.unwrap_err();
    assert_eq!(error.reason(), "isolation_failed");
    assert!(matches!(error, Error::IsolationFailed { .. }));
    let message = error.to_string();
    assert!(
        message.contains("ids: uid 0/0/0/0 gid 0/0/0/0"),
        "{message}"
    );
    let receipt = error.receipt().expect("the failed receipt is kept");
    assert_eq!(receipt.failed, ["ids"]);
    assert!(!receipt.passed);
    cluster.assert_gone(RUN);
}

#[tokio::test]
async fn no_receipt_or_a_garbled_one_refuses_the_run_with_what_the_log_said() {
    for (kind, needle) in [
        (serde_json::Value::Null, "wrote no isolation receipt"),
        (json!("garbled"), "not JSON"),
    ] {
        let scenario = json!({"receipt": kind, "logs": "hello from somewhere\n"});
        let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(30), 4096).await else {
            return;
        };
        let error = ran.unwrap_err();
        assert_eq!(error.reason(), "isolation_failed");
        let message = error.to_string();
        assert!(message.contains(needle), "{kind}: {message}");
        assert!(message.contains("exited 0"), "{kind}: {message}");
        assert!(
            message.contains("hello from somewhere"),
            "{kind}: {message}"
        );
        assert!(error.receipt().is_none());
        cluster.assert_gone(RUN);
    }
}

#[tokio::test]
async fn a_deadline_before_the_pod_wrote_anything_is_a_timeout_and_output_without_a_receipt_is_not()
{
    let scenario = json!({"run_s": -1, "receipt": null});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(3), 4096).await else {
        return;
    };
    let ran = ran.unwrap();
    assert_eq!(ran.result.status, agentguard_container::RunStatus::TimedOut);
    assert!(ran.receipt.is_none());
    assert!(ran.result.stdout.is_empty());
    cluster.assert_gone(RUN);
    drop(cluster);
    let scenario = json!({"run_s": -1, "receipt": null, "logs": "ran anyway\n"});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(3), 4096).await else {
        return;
    };
    let error = ran.unwrap_err();
    assert_eq!(error.reason(), "isolation_failed");
    assert!(error.to_string().contains("ran anyway"), "{error}");
    cluster.assert_gone(RUN);
}

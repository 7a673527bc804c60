//! `agentguard mcp` with `engine = "kubernetes"`, on the wire: the binary, the real kubectl
//! and kmock's scripted API on 127.0.0.1. Tools are listed as for a local engine, each call is
//! a Job whose result and audit are a cluster run's (an egress call's proxy decisions in the
//! same verified log and counted in the result), a cancelled call's Job is deleted, and so is
//! a running call's when the server is stopped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agentguard_test_support::KmockCluster;
use serde_json::{Value, json};

use crate::cluster::{config, proxy_lines, the_job};
use crate::mcp::{Server, audited, initialize};

fn server(cluster: &KmockCluster, dir: &Path) -> Server {
    let cfg = config(dir, 60);
    let kubeconfig = cluster.kubeconfig().to_str().unwrap().to_owned();
    let mut server = Server::start_with(Path::new(&cfg), &[("KUBECONFIG", &kubeconfig)]);
    initialize(&mut server, "wire", "1");
    server
}

fn call(server: &mut Server, id: u64, name: &str) -> Value {
    let (response, _) = server.request(
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name}}),
    );
    response["result"]["structuredContent"].clone()
}

#[test]
fn tools_on_a_cluster_are_jobs_with_a_cluster_runs_result_and_audit() {
    let lines = proxy_lines();
    let scenario = json!({"logs": "2 passed\n", "proxy_log": lines[..2], "proxy_tail": lines[2..]});
    let Some(cluster) = KmockCluster::start("mcp on a cluster", &scenario.to_string()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut server = server(&cluster, dir.path());
    let (list, _) =
        server.request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["install", "tests"]);
    let tests = call(&mut server, 3, "tests");
    assert_eq!(tests["status"], "exited", "{tests}");
    assert_eq!(
        (&tests["exit_code"], &tests["stdout"]),
        (&json!(0), &json!("2 passed\n"))
    );
    let job = tests["container"].as_str().unwrap().to_owned();
    cluster.assert_gone(&job);
    let install = call(&mut server, 4, "install");
    assert_eq!(
        (&install["egress"]["allowed"], &install["egress"]["denied"]),
        (&json!(1), &json!(1)),
        "{install}"
    );
    assert_eq!(
        install["egress"]["refused"].as_array().unwrap().len(),
        1,
        "{install}"
    );
    drop(server.child.stdin.take());
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    let runs = audited(dir.path(), "container_run");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    for run in &runs {
        assert_eq!(
            (&run["data"]["engine"], &run["reason"]),
            (&json!("kubernetes"), &json!("exited"))
        );
    }
    assert_eq!(runs[0]["data"]["container"], job.as_str());
    let calls = audited(dir.path(), "mcp_call");
    assert_eq!(calls[0]["data"]["container"], job.as_str(), "{calls:#?}");
    let connects = audited(dir.path(), "egress_connect");
    assert_eq!(connects.len(), 2, "{connects:#?}");
    assert_eq!(connects[0]["subject"]["run"], install["container"]);
    assert_eq!(
        audited(dir.path(), "egress_stream")[0]["reason"],
        "complete"
    );
}

#[test]
fn a_cancelled_call_and_a_stopped_server_delete_their_jobs() {
    let Some(cluster) = KmockCluster::start("mcp cancel on a cluster", r#"{"run_s": -1}"#) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut server = server(&cluster, dir.path());
    server.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "tests"}}),
    );
    let job = the_job(&cluster);
    cluster.wait_running(&job);
    server.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}),
    );
    cluster.assert_gone(&job);
    let cancelled = agentguard_test_support::eventually_blocking(
        "the cancelled call's event",
        Duration::from_secs(10),
        || {
            audited(dir.path(), "mcp_call")
                .into_iter()
                .find(|c| c["reason"] == "cancelled")
        },
    );
    assert_eq!(cancelled["data"]["container"], job.as_str(), "{cancelled}");
    let stopped = audited(dir.path(), "container_run");
    assert!(
        stopped
            .iter()
            .any(|r| r["reason"] == "cancelled" && r["data"]["engine"] == "kubernetes"),
        "{stopped:#?}"
    );
    // A second call runs until SIGTERM stops the server: its Job is deleted before the answer.
    server.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tests"}}),
    );
    let second = agentguard_test_support::eventually_blocking(
        "the second Job",
        Duration::from_secs(30),
        || {
            cluster
                .names("jobs.batch")
                .into_iter()
                .find(|name| *name != job)
        },
    );
    cluster.wait_running(&second);
    Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    let answer = server.next();
    assert_eq!(answer["id"], 3, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["reason"],
        "shutting_down"
    );
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    cluster.assert_gone(&second);
}

#[test]
fn a_call_whose_pod_fails_its_receipt_is_isolation_failed_and_not_retryable() {
    let scenario = json!({"receipt": "fail", "exit_code": 125});
    let Some(cluster) = KmockCluster::start("mcp receipt on a cluster", &scenario.to_string())
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut server = server(&cluster, dir.path());
    let tests = call(&mut server, 3, "tests");
    assert_eq!(
        (&tests["reason"], &tests["retryable"]),
        (&json!("isolation_failed"), &json!(false)),
        "{tests}"
    );
    assert!(
        tests["message"]
            .as_str()
            .unwrap()
            .contains("ids: uid 0/0/0/0"),
        "{tests}"
    );
    drop(server.child.stdin.take());
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    let receipts = audited(dir.path(), "isolation_receipt");
    assert_eq!(receipts.len(), 1, "{receipts:#?}");
    assert_eq!(receipts[0]["decision"], "deny");
    let runs = audited(dir.path(), "container_run");
    assert_eq!(runs[0]["reason"], "isolation_failed", "{runs:#?}");
    assert_eq!(
        runs[0]["data"]["container"],
        receipts[0]["data"]["container"]
    );
}

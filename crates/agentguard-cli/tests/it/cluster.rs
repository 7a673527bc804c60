//! `agentguard run` and `agentguard gc --config` on a cluster: the binary, the real kubectl and
//! kmock's scripted API on 127.0.0.1 (`KmockCluster`): exit statuses as on a local engine, the
//! JSON result, the audit event naming the engine, the namespace and what was weakened;
//! SIGTERM deletes the Job; after SIGKILL the Job stays and `gc` deletes it. An egress run's
//! proxy decisions, scripted as its pod's log, land in the one verified audit log and count in
//! `--json`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agentguard_audit::{AuditSink, Decision, Event, StreamSink};
use agentguard_test_support::KmockCluster;
use serde_json::{Value, json};

use crate::stderr;

pub(crate) fn config(dir: &Path, timeout: u32) -> String {
    let audit = dir.join("audit.jsonl");
    let text = format!(
        r#"image = "localhost/tools@sha256:{}"
engine = "kubernetes"
timeout = {timeout}
max_output_bytes = 4096

[kubernetes]
namespace = "agentguard"
accept_weakened = ["tmp_noexec", "pids"]
proxy_image = "localhost/agentguard@sha256:{}"

[egress]
allow = ["pkgs.example.com"]

[commands]
tests = ["python3", "-m", "pytest", "-q"]

[commands.install]
argv = ["pip", "install", "-r", "requirements.txt"]
network = "egress"

[audit]
path = "{}"
"#,
        "a".repeat(64),
        "b".repeat(64),
        audit.display()
    );
    let path = dir.join("agentguard.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn agentguard(cluster: &KmockCluster, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentguard"));
    command.args(args).env("KUBECONFIG", cluster.kubeconfig());
    command
}

fn output(cluster: &KmockCluster, args: &[&str]) -> Output {
    agentguard(cluster, args).output().unwrap()
}

fn audit(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The only Job in the namespace, once there is one.
pub(crate) fn the_job(cluster: &KmockCluster) -> String {
    agentguard_test_support::eventually_blocking(
        "a Job is created",
        Duration::from_secs(30),
        || cluster.names("jobs.batch").into_iter().next(),
    )
}

#[test]
fn a_run_on_the_cluster_exits_with_the_commands_code_and_is_audited() {
    let scenario = r#"{"logs": "1 failed, 1 passed\n", "exit_code": 1}"#;
    let Some(cluster) = KmockCluster::start("cli run on a cluster", scenario) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 60);
    let out = output(&cluster, &["run", "--config", &cfg, "tests", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "exited");
    assert_eq!(result["exit_code"], 1);
    assert_eq!(result["stdout"], "1 failed, 1 passed\n");
    assert_eq!(result["egress"], Value::Null);
    let job = result["container"].as_str().unwrap().to_owned();
    cluster.assert_gone(&job);
    let events = audit(dir.path());
    let run = events
        .iter()
        .find(|e| e["kind"] == "container_run")
        .unwrap();
    assert_eq!(run["data"]["engine"], "kubernetes", "{run}");
    assert_eq!(run["data"]["namespace"], "agentguard", "{run}");
    assert_eq!(run["data"]["container"], job.as_str(), "{run}");
    // What ran (issue 37): the pod's imageID, the argv, the config's digest, who.
    assert_eq!(
        run["data"]["image_id"],
        format!("localhost/tools@sha256:{}", "c".repeat(64)).as_str(),
        "{run}"
    );
    assert!(run["data"]["argv"].is_array(), "{run}");
    assert_eq!(
        run["data"]["config_sha256"].as_str().map(str::len),
        Some(64),
        "{run}"
    );
    assert!(run["data"]["invoker"]["pid"].is_u64(), "{run}");
    assert_eq!(
        run["data"]["weakened"],
        serde_json::json!(["tmp_noexec", "pids"]),
        "{run}"
    );
    // Without --json the log is printed and the status is the same.
    let out = output(&cluster, &["run", "--config", &cfg, "tests"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1 failed, 1 passed\n");
    let verify = output(
        &cluster,
        &[
            "audit",
            "verify",
            dir.path().join("audit.jsonl").to_str().unwrap(),
        ],
    );
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
}

#[test]
fn a_timeout_on_the_cluster_is_124_and_an_oom_kill_137() {
    let Some(cluster) = KmockCluster::start("cli timeout on a cluster", r#"{"run_s": -1}"#) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2);
    let out = output(&cluster, &["run", "--config", &cfg, "tests"]);
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(stderr(&out).contains("Job"), "{}", stderr(&out));
    assert!(cluster.names("jobs.batch").is_empty());
    drop(cluster);
    let scenario = r#"{"exit_code": 137, "reason": "OOMKilled"}"#;
    let Some(cluster) = KmockCluster::start("cli oom on a cluster", scenario) else {
        return;
    };
    // A timeout long enough that a loaded machine never turns the OOM kill into a timeout.
    let cfg = config(dir.path(), 60);
    let out = output(&cluster, &["run", "--config", &cfg, "tests"]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert!(stderr(&out).contains("OOM"), "{}", stderr(&out));
}

#[test]
fn sigterm_deletes_the_job_and_after_sigkill_gc_does() {
    let Some(cluster) = KmockCluster::start("cli signals on a cluster", r#"{"run_s": -1}"#) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 120);
    let mut child = agentguard(&cluster, &["run", "--config", &cfg, "tests"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let job = the_job(&cluster);
    cluster.wait_running(&job);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    cluster.assert_gone(&job);

    let mut child = agentguard(&cluster, &["run", "--config", &cfg, "tests"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let job = the_job(&cluster);
    cluster.wait_running(&job);
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        cluster.names("jobs.batch"),
        std::slice::from_ref(&job),
        "a SIGKILLed run leaves its Job"
    );
    let dry = output(&cluster, &["gc", "--config", &cfg, "--dry-run"]);
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains(&format!("would delete run {job}")),
        "{}",
        String::from_utf8_lossy(&dry.stdout)
    );
    assert_eq!(cluster.names("jobs.batch"), std::slice::from_ref(&job));
    let gc = output(&cluster, &["gc", "--config", &cfg]);
    assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    let text = String::from_utf8_lossy(&gc.stdout);
    assert!(
        text.contains(&format!("deleted run {job}")) && text.contains("gone"),
        "{text}"
    );
    cluster.assert_gone(&job);
}

#[test]
fn the_canary_reports_what_it_reached() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap().to_string();
    let closed = {
        let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        gone.local_addr().unwrap().to_string()
    };
    let canary = |targets: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_agentguard"))
            .args(["k8s", "canary", "--timeout", "2"])
            .args(targets)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = canary(&[&closed], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&format!("blocked {closed}")));
    let out = canary(&[&closed, &open], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("REACHED {open}")));
    // In a pod, the API server's Service is the default target.
    let port = open.rsplit(':').next().unwrap();
    let out = canary(
        &[],
        &[
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", port),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = canary(&[], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no target"), "{}", stderr(&out));
}

#[test]
fn doctor_checks_the_cluster_of_a_kubernetes_config_and_its_canary_lets_runs_go() {
    let scenario = r#"{"canary": null, "logs": "blocked 10.96.0.1:443 (no answer in 3 s)\n"}"#;
    let Some(cluster) = KmockCluster::start("cli doctor on a cluster", scenario) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 60);
    // Before the canary has run, runs are refused.
    let out = output(&cluster, &["run", "--config", &cfg, "tests"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("agentguard doctor"),
        "{}",
        stderr(&out)
    );
    let out = agentguard(&cluster, &["doctor"])
        .env("AGENTGUARD_CONFIG", &cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    for expected in [
        "OK   namespace agentguard exists",
        "OK   NetworkPolicy is enforced in agentguard",
        "WARN `pids` is weakened",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    let out = output(&cluster, &["run", "--config", &cfg, "tests"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// What the run's proxy writes on its log, by the real writer, for a run kmock names
/// (`@RUN@`): one allowed and one denied connect, then its end line.
pub(crate) fn proxy_lines() -> Vec<String> {
    let sink = StreamSink::new(Vec::new(), "@RUN@");
    let client = "10.1.2.3:40000";
    for (decision, reason, target) in [
        (Decision::Allow, "ok", "pkgs.example.com:443"),
        (Decision::Deny, "domain_not_allowed", "evil.example.com:443"),
    ] {
        sink.record(Event::egress_connect(decision, reason, target, client))
            .unwrap();
    }
    sink.end().unwrap();
    let text = String::from_utf8(sink.into_inner()).unwrap();
    text.lines().map(str::to_owned).collect()
}

/// `run install --json` (an egress command) on a cluster playing `scenario`, which exits 0.
fn install(what: &str, scenario: &Value) -> Option<(KmockCluster, tempfile::TempDir, Output)> {
    let cluster = KmockCluster::start(what, &scenario.to_string())?;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 60);
    let out = output(&cluster, &["run", "--config", &cfg, "install", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    Some((cluster, dir, out))
}

#[test]
fn an_egress_runs_proxy_decisions_are_in_the_verified_log_and_counted() {
    let lines = proxy_lines();
    let scenario = json!({"proxy_log": lines[..2], "proxy_tail": lines[2..]});
    let Some((cluster, dir, out)) = install("cli egress on a cluster", &scenario) else {
        return;
    };
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        result["egress"],
        json!({"allowed": 1, "denied": 1, "stream": "complete", "refused": result["egress"]["refused"].clone()}),
        "{result}"
    );
    let job = result["container"].as_str().unwrap();
    let events = audit(dir.path());
    let connects: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "egress_connect")
        .collect();
    assert_eq!(connects.len(), 2, "{events:#?}");
    for connect in &connects {
        assert_eq!(connect["subject"]["run"], job, "{connect}");
        let pod = connect["data"]["pod"].as_str().unwrap();
        assert!(pod.starts_with(&agentguard_k8s::proxy_name(job)), "{pod}");
    }
    assert_eq!(connects[1]["reason"], "domain_not_allowed");
    let stream = events
        .iter()
        .find(|e| e["kind"] == "egress_stream")
        .unwrap();
    assert_eq!(stream["reason"], "complete", "{stream}");
    let log = dir.path().join("audit.jsonl");
    let verify = output(&cluster, &["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
}

#[test]
fn a_cut_egress_stream_is_said_on_stderr_and_recorded() {
    let lines = proxy_lines();
    let scenario = json!({"proxy_log": lines[..1], "proxy_cut": true});
    // The command's own status still holds (0); the gap is said and recorded.
    let Some((_cluster, dir, out)) = install("cli egress cut on a cluster", &scenario) else {
        return;
    };
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["egress"]["stream"], "stream_cut", "{result}");
    assert_eq!(result["egress"]["allowed"], 1, "{result}");
    assert!(
        stderr(&out).contains("without its end line"),
        "{}",
        stderr(&out)
    );
    let events = audit(dir.path());
    let stream = events
        .iter()
        .find(|e| e["kind"] == "egress_stream")
        .unwrap();
    assert_eq!(
        (&stream["decision"], &stream["reason"]),
        (&json!("error"), &json!("stream_cut"))
    );
}

/// `agentguard k8s manifests` prints the same labels (keys, and the values that do not name
/// the run or its owner's process) as the Job a run really creates.
#[test]
fn manifests_print_the_labels_a_real_run_applies() {
    let Some(cluster) = KmockCluster::start("cli labels on a cluster", r#"{"pending_s": 1.0}"#)
    else {
        return;
    };
    let Some(python) = agentguard_test_support::k8s_python("cli labels on a cluster") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 60);
    let mut child = agentguard(&cluster, &["run", "--config", &cfg, "tests"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let job = the_job(&cluster);
    let real: Value = serde_json::from_str(&cluster.wait_for("jobs.batch", &job)).unwrap();
    assert!(child.wait().unwrap().success());
    let printed = output(&cluster, &["k8s", "manifests", "--config", &cfg, "tests"]);
    let yaml = dir.path().join("printed.yaml");
    std::fs::write(&yaml, &printed.stdout).unwrap();
    let read = Command::new(python)
        .args(["-c", "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))"])
        .arg(&yaml)
        .output()
        .unwrap();
    let documents: Vec<Value> = serde_json::from_slice(&read.stdout).unwrap();
    let printed_job = documents.iter().find(|d| d["kind"] == "Job").unwrap();
    let labels = |job: &Value| -> Vec<(String, String)> {
        let run = job["metadata"]["name"].as_str().unwrap().to_owned();
        job["metadata"]["labels"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let v = v.as_str().unwrap();
                // The run's name and its owner's pid, start and deadline differ per run.
                let per_run = [
                    agentguard_container::LABEL_OWNER,
                    agentguard_container::LABEL_OWNER_START,
                    agentguard_container::LABEL_DEADLINE,
                ];
                let fixed = v != run && !per_run.contains(&k.as_str());
                (k.clone(), if fixed { v.to_owned() } else { "*".into() })
            })
            .collect()
    };
    assert_eq!(labels(printed_job), labels(&real));
}

/// Issue 37 on a cluster: the relay's receipt is recorded before the run's `container_run`
/// (same Job), without the run's provenance; a failed one ends the run `isolation_failed`
/// (125), naming the check, with the deny receipt in the verified log.
#[test]
fn a_cluster_runs_receipt_is_recorded_first_and_a_failed_one_refuses_with_125() {
    let Some(cluster) = KmockCluster::start("cli receipt on a cluster", r#"{"logs": "ok\n"}"#)
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 60);
    let out = output(&cluster, &["run", "--config", &cfg, "tests"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let events = audit(dir.path());
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["isolation_receipt", "container_run"], "{events:#?}");
    let (receipt, run) = (&events[0], &events[1]);
    assert_eq!(receipt["decision"], "allow", "{receipt}");
    assert_eq!(receipt["data"]["container"], run["data"]["container"]);
    assert_eq!(receipt["data"]["engine"], "kubernetes");
    assert!(
        receipt["data"]["checks"]["interfaces"]
            .as_str()
            .unwrap()
            .contains("NetworkPolicy"),
        "{receipt}"
    );
    assert!(receipt["data"]["invoker"].is_null(), "{receipt}");
    drop(cluster);

    let scenario = r#"{"receipt": "fail", "exit_code": 125, "logs": "never\n"}"#;
    let Some(cluster) = KmockCluster::start("cli failed receipt on a cluster", scenario) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 60);
    let out = output(&cluster, &["run", "--config", &cfg, "tests"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("(isolation_failed)") && said.contains("ids: uid 0/0/0/0"),
        "{said}"
    );
    assert!(out.stdout.is_empty());
    let events = audit(dir.path());
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["isolation_receipt", "container_run"], "{events:#?}");
    assert_eq!(
        (&events[0]["decision"], &events[0]["data"]["failed"]),
        (&json!("deny"), &json!(["ids"]))
    );
    assert_eq!(
        (&events[1]["decision"], &events[1]["reason"]),
        (&json!("error"), &json!("isolation_failed"))
    );
    let log = dir.path().join("audit.jsonl");
    let verify = output(&cluster, &["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    let job = events[1]["data"]["container"].as_str().unwrap();
    let show = output(
        &cluster,
        &["audit", "show", log.to_str().unwrap(), "--run", job],
    );
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        shown.contains("isolation_receipt") && shown.contains("isolation_failed"),
        "{shown}"
    );
}

//! The kubectl executor end to end: the real `kubectl` against kmock's in-memory Kubernetes
//! API on 127.0.0.1 (`agentguard-test-support`'s `KmockCluster`, kmock from PyPI in the venv
//! `cargo xtask setup` makes), with the pod's states and log scripted per test. Without the
//! venv or kubectl the tests are SKIPPED loudly; `cargo xtask ci` sets
//! `AGENTGUARD_REQUIRE_KMOCK=1`, which makes a skip a failure.

use std::sync::Arc;
use std::time::Duration;

use agentguard_container::{ContainerSpec, RunStatus};
use agentguard_k8s::{EgressPlan, K8sSettings, RunNetwork, RunRequest, Weakened};
use agentguard_kubectl::{Error, Kubectl, gc, run};
use agentguard_test_support::KmockCluster as Cluster;
use serde_json::json;

mod receipt;
mod stream;

const RUN: &str = "agentguard-1-2-3";

fn spec(timeout: Duration, cap: usize) -> ContainerSpec {
    ContainerSpec::builder(format!("localhost/tools@sha256:{}", "a".repeat(64)))
        .command("tests", ["python3", "-m", "pytest", "-q"])
        .timeout(timeout)
        .max_output_bytes(cap)
        .build()
        .unwrap()
}

fn settings() -> K8sSettings {
    K8sSettings {
        namespace: "agentguard".into(),
        context: None,
        runtime_class: None,
        workspace_claim: None,
        proxy_image: Some(format!("localhost/agentguard@sha256:{}", "b".repeat(64))),
    }
}

fn request<'a>(
    spec: &'a ContainerSpec,
    labels: &'a [(String, String)],
    network: RunNetwork,
) -> RunRequest<'a> {
    // The request borrows its invocation; a test's request lives as long as the test.
    let invocation = Box::leak(Box::new(spec.commands().invoke("tests", &[]).unwrap()));
    RunRequest {
        spec,
        invocation,
        run_id: RUN,
        labels,
        network,
        workspace_rw: false,
    }
}

const ALL: &[Weakened] = Weakened::ALL;

/// `pkgs.example.com` on 443 through the run's proxy on 3128.
fn egress() -> RunNetwork {
    RunNetwork::Egress(EgressPlan {
        hosts: vec!["pkgs.example.com".into()],
        ports: vec![443],
        cidrs: vec![],
        proxy_port: 3128,
        proxy_address: None,
        routes: vec![],
    })
}

fn kubectl_for(cluster: &Cluster) -> Kubectl {
    Kubectl::new(&settings()).with_kubeconfig(cluster.kubeconfig())
}

/// Runs `tests` against a cluster playing `scenario`; returns the result and the cluster.
async fn run_in(
    scenario: serde_json::Value,
    timeout: Duration,
    cap: usize,
) -> Option<(agentguard_kubectl::Result<agentguard_kubectl::Ran>, Cluster)> {
    let cluster = Cluster::start("kubectl executor", &scenario.to_string())?;
    let spec = spec(timeout, cap);
    let labels = [gc::host_label()];
    let kubectl = kubectl_for(&cluster);
    let outcome = run(
        &kubectl,
        &settings(),
        &request(&spec, &labels, RunNetwork::None),
        ALL,
        None,
    )
    .await
    .map(|accepted| accepted.expect("every weakening is accepted"));
    Some((outcome, cluster))
}

#[tokio::test]
async fn a_run_that_succeeds_reports_its_log_and_leaves_nothing() {
    let Some((ran, cluster)) =
        run_in(json!({"logs": "1 passed\n"}), Duration::from_secs(30), 4096).await
    else {
        return;
    };
    let ran = ran.unwrap();
    assert_eq!(ran.result.status, RunStatus::Exited);
    assert_eq!(ran.result.exit_code, Some(0));
    assert_eq!(ran.result.stdout, b"1 passed\n");
    assert_eq!(ran.result.container, RUN);
    assert_eq!(ran.weakened, ALL);
    cluster.assert_gone(RUN);
    // What was created: the NetworkPolicy before the Job, both with the run's labels.
    let created = cluster.created();
    assert_eq!(created, ["networkpolicies", "jobs"], "{created:?}");
}

#[tokio::test]
async fn a_non_zero_exit_is_the_commands_own_code() {
    let scenario = json!({"logs": "1 failed\n", "exit_code": 3});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(30), 4096).await else {
        return;
    };
    let ran = ran.unwrap();
    assert_eq!(ran.result.status, RunStatus::Exited);
    assert_eq!(ran.result.exit_code, Some(3));
    cluster.assert_gone(RUN);
}

#[tokio::test]
async fn an_oom_kill_is_reported_as_killed_with_137() {
    let scenario = json!({"exit_code": 137, "reason": "OOMKilled"});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(30), 4096).await else {
        return;
    };
    let ran = ran.unwrap();
    assert_eq!(ran.result.status, RunStatus::Killed);
    assert_eq!(ran.result.exit_code, Some(137));
    cluster.assert_gone(RUN);
}

#[tokio::test]
async fn a_timeout_deletes_the_job() {
    let scenario = json!({"run_s": -1, "logs": "started\n"});
    // Long enough for the log to be followed on a loaded machine (2 s lost it once, while
    // another build ran): the command never ends, so the timeout is what ends it either way.
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(10), 4096).await else {
        return;
    };
    let ran = ran.unwrap();
    assert_eq!(ran.result.status, RunStatus::TimedOut);
    assert_eq!(ran.result.exit_code, None);
    assert_eq!(ran.result.stdout, b"started\n");
    cluster.assert_gone(RUN);
}

#[tokio::test]
async fn output_over_the_cap_ends_the_run_and_keeps_the_cap() {
    let scenario = json!({"run_s": -1, "logs": "x".repeat(1000), "log_repeat": 10});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(30), 4096).await else {
        return;
    };
    let ran = ran.unwrap();
    assert_eq!(ran.result.status, RunStatus::OutputLimit);
    assert!(ran.result.truncated);
    assert_eq!(ran.result.stdout.len(), 4096);
    cluster.assert_gone(RUN);
}

#[tokio::test]
async fn an_api_error_names_what_the_server_said() {
    let scenario = json!({"create_error": 403});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(30), 4096).await else {
        return;
    };
    let error = ran.unwrap_err();
    assert!(matches!(error, Error::Kubectl { .. }), "{error:?}");
    assert_eq!(error.reason(), "cluster_error");
    assert!(error.to_string().contains("forbidden"), "{error}");
    cluster.assert_gone(RUN);
}

#[tokio::test]
async fn a_pod_that_cannot_pull_its_image_fails_at_once() {
    let scenario = json!({"waiting": "ImagePullBackOff"});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(60), 4096).await else {
        return;
    };
    let error = ran.unwrap_err();
    assert!(
        matches!(&error, Error::NotStarted { reason, .. } if reason == "ImagePullBackOff"),
        "{error:?}"
    );
    cluster.assert_gone(RUN);
}

#[tokio::test]
async fn a_server_older_than_the_checked_schema_is_refused_before_anything_is_created() {
    let Some((ran, cluster)) = run_in(json!({"version": 30}), Duration::from_secs(30), 4096).await
    else {
        return;
    };
    let error = ran.unwrap_err();
    assert!(
        matches!(
            error,
            Error::ServerTooOld {
                major: 1,
                minor: 30
            }
        ),
        "{error:?}"
    );
    assert!(cluster.created().is_empty(), "{:?}", cluster.created());
}

#[tokio::test]
async fn a_weakening_not_accepted_is_refused_before_anything_is_created() {
    let Some(cluster) = Cluster::start("weakening", "{}") else {
        return;
    };
    let spec = spec(Duration::from_secs(30), 4096);
    let labels = [];
    let refused = run(
        &kubectl_for(&cluster),
        &settings(),
        &request(&spec, &labels, RunNetwork::None),
        &[Weakened::TmpNoexec],
        None,
    )
    .await
    .unwrap()
    .unwrap_err();
    assert_eq!(refused.0, Weakened::Pids);
    assert!(refused.to_string().contains("accept_weakened"), "{refused}");
    assert!(cluster.created().is_empty(), "{:?}", cluster.created());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_run_deletes_its_job() {
    let Some(cluster) = Cluster::start("dropped run", r#"{"run_s": -1}"#) else {
        return;
    };
    let cluster = Arc::new(cluster);
    let spec = spec(Duration::from_secs(60), 4096);
    let labels = [];
    let kubectl = kubectl_for(&cluster);
    let settings = settings();
    let request = request(&spec, &labels, RunNetwork::None);
    let running = run(&kubectl, &settings, &request, ALL, None);
    let watcher = Arc::clone(&cluster);
    // Cancelled once the pod runs: the future is dropped mid-watch.
    tokio::select! {
        _ = running => panic!("the run ended by itself"),
        _ = tokio::task::spawn_blocking(move || watcher.wait_running(RUN)) => {}
    }
    cluster.assert_gone(RUN);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_egress_run_points_the_job_at_its_proxys_cluster_ip() {
    let scenario = r#"{"pending_s": 1.0, "cluster_ip": "10.96.7.7"}"#;
    let Some(cluster) = Cluster::start("egress run", scenario) else {
        return;
    };
    let cluster = Arc::new(cluster);
    let spec = spec(Duration::from_secs(30), 4096);
    let labels = [];
    let network = egress();
    let kubectl = kubectl_for(&cluster);
    let settings = settings();
    let request = request(&spec, &labels, network);
    let watcher = Arc::clone(&cluster);
    let job = tokio::task::spawn_blocking(move || watcher.wait_for("jobs.batch", RUN));
    let (ran, job) = tokio::join!(run(&kubectl, &settings, &request, ALL, None), job);
    let ran = ran.unwrap().unwrap();
    let job: serde_json::Value = serde_json::from_str(&job.unwrap()).unwrap();
    assert_eq!(ran.result.status, RunStatus::Exited);
    let env = job["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
    assert!(env.contains("http://10.96.7.7:3128"), "{env}");
    assert_eq!(
        cluster.created(),
        [
            "networkpolicies",
            "deployments",
            "services",
            "networkpolicies",
            "jobs"
        ]
    );
    cluster.assert_gone(RUN);
    cluster.assert_gone(&agentguard_k8s::proxy_name(RUN));
}

#[tokio::test]
async fn gc_deletes_the_runs_of_gone_owners_and_keeps_the_live_ones() {
    let Some(cluster) = Cluster::start("gc", r#"{"run_s": -1}"#) else {
        return;
    };
    let kubectl = kubectl_for(&cluster);
    let (host_key, host) = gc::host_label();
    let far = (std::time::SystemTime::now() + Duration::from_secs(3600))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let (me, my_start) = agentguard_container::gc::this_owner();
    for (run, owner, start, deadline) in [
        ("agentguard-dead-1", "999999999", "1", far.as_str()),
        (
            "agentguard-live-1",
            me.as_str(),
            my_start.as_str(),
            far.as_str(),
        ),
        ("agentguard-late-1", me.as_str(), my_start.as_str(), "1000"),
    ] {
        let labels = json!({
            "app.kubernetes.io/managed-by": "agentguard",
            agentguard_k8s::LABEL_RUN: run,
            agentguard_container::LABEL_OWNER: owner,
            agentguard_container::LABEL_OWNER_START: start,
            agentguard_container::LABEL_DEADLINE: deadline,
            host_key.clone(): host,
        });
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": run, "labels": labels},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never", "containers": [{"name": "run", "image": "x"}]}}}});
        kubectl.create(&[job]).await.unwrap();
    }
    let mut stale = gc::sweep(&kubectl, false).await.unwrap();
    stale.sort_by(|a, b| a.run.cmp(&b.run));
    let runs: Vec<&str> = stale.iter().map(|s| s.run.as_str()).collect();
    assert_eq!(
        runs,
        ["agentguard-dead-1", "agentguard-late-1"],
        "{stale:?}"
    );
    assert!(stale[0].why.contains("gone"), "{stale:?}");
    assert!(stale[1].why.contains("deadline"), "{stale:?}");
    cluster.assert_gone("agentguard-dead-1");
    cluster.assert_gone("agentguard-late-1");
    assert!(
        kubectl
            .get("jobs.batch", "agentguard-live-1")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn kubectl_missing_is_named() {
    let kubectl = Kubectl::new(&settings()).with_program("/nonexistent/kubectl");
    let error = kubectl.check_server().await.unwrap_err();
    assert_eq!(error.reason(), "kubectl_missing");
    assert!(
        error.to_string().contains("/nonexistent/kubectl"),
        "{error}"
    );
}

#[tokio::test]
async fn a_run_refuses_until_a_blocked_canary_verdict_is_recorded() {
    for (canary, says) in [
        ("null", "no canary verdict"),
        ("\"reached\"", "reached what NetworkPolicy should block"),
        ("\"stale\"", "h old"),
    ] {
        let scenario = format!(r#"{{"canary": {canary}}}"#);
        let Some(cluster) = Cluster::start("unproven namespace", &scenario) else {
            return;
        };
        let spec = spec(Duration::from_secs(30), 4096);
        let labels = [];
        let error = run(
            &kubectl_for(&cluster),
            &settings(),
            &request(&spec, &labels, RunNetwork::None),
            ALL,
            None,
        )
        .await
        .unwrap_err();
        assert_eq!(
            error.reason(),
            "networkpolicy_unproven",
            "{canary}: {error}"
        );
        assert!(error.to_string().contains(says), "{canary}: {error}");
        assert!(error.to_string().contains("agentguard doctor"), "{error}");
        assert!(
            cluster.created().is_empty(),
            "{canary}: {:?}",
            cluster.created()
        );
    }
}

fn levels(findings: &[agentguard_container::doctor::Finding]) -> Vec<String> {
    findings
        .iter()
        .map(|f| format!("{:?} {}", f.level, f.what))
        .collect()
}

#[tokio::test]
async fn doctor_proves_the_policy_with_its_canary_and_runs_follow_the_verdict() {
    use agentguard_container::doctor::Level;
    let scenario = r#"{"canary": null, "runtime_classes": {"gvisor": "runsc"}, "logs": "blocked 10.96.0.1:443 (no answer in 3 s)\n"}"#;
    let Some(cluster) = Cluster::start("doctor, blocked", scenario) else {
        return;
    };
    let kubectl = kubectl_for(&cluster);
    let mut with_class = settings();
    with_class.runtime_class = Some("gvisor".into());
    let labels = [gc::host_label()];
    let findings =
        agentguard_kubectl::doctor::diagnose(&kubectl, &with_class, true, ALL, &labels).await;
    let seen = levels(&findings);
    assert!(findings.iter().all(|f| f.level != Level::Fail), "{seen:#?}");
    for expected in [
        "within one minor version",
        "namespace agentguard exists",
        "enforces Pod Security `restricted`",
        "RuntimeClass gvisor exists with handler runsc",
        "NetworkPolicy is enforced in agentguard",
    ] {
        assert!(
            seen.iter().any(|s| s.contains(expected)),
            "{expected}: {seen:#?}"
        );
    }
    // The canary ran as a sandbox run (its NetworkPolicy first) and is gone.
    assert_eq!(cluster.created()[..2], ["networkpolicies", "jobs"]);
    assert!(cluster.names("jobs.batch").is_empty());
    // The verdict lets runs go ahead.
    let spec = spec(Duration::from_secs(30), 4096);
    let ran = run(
        &kubectl,
        &settings(),
        &request(&spec, &labels, RunNetwork::None),
        ALL,
        None,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(ran.result.exit_code, Some(0));
}

#[tokio::test]
async fn a_canary_that_gets_through_fails_doctor_and_refuses_runs() {
    let scenario =
        r#"{"canary": null, "psa": "baseline", "exit_code": 1, "logs": "REACHED 10.96.0.1:443\n"}"#;
    let Some(cluster) = Cluster::start("doctor, reached", scenario) else {
        return;
    };
    let kubectl = kubectl_for(&cluster);
    let mut with_class = settings();
    with_class.runtime_class = Some("gvisor".into());
    let labels = [gc::host_label()];
    let findings = agentguard_kubectl::doctor::diagnose(
        &kubectl,
        &with_class,
        true,
        &[Weakened::TmpNoexec],
        &labels,
    )
    .await;
    let seen = levels(&findings);
    let fails: Vec<&String> = seen.iter().filter(|s| s.starts_with("Fail")).collect();
    assert!(
        fails
            .iter()
            .any(|s| s.contains("NOT enforced") && s.contains("REACHED 10.96.0.1:443")),
        "{seen:#?}"
    );
    assert!(
        fails
            .iter()
            .any(|s| s.contains("RuntimeClass gvisor does not exist")),
        "{seen:#?}"
    );
    assert!(
        fails
            .iter()
            .any(|s| s.contains("`pids` is weakened") && s.contains("not accepted")),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.starts_with("Warn") && s.contains("`baseline`")),
        "{seen:#?}"
    );
    let spec = spec(Duration::from_secs(30), 4096);
    let error = run(
        &kubectl,
        &settings(),
        &request(&spec, &labels, RunNetwork::None),
        ALL,
        None,
    )
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("REACHED 10.96.0.1:443"),
        "{error}"
    );
}

#[tokio::test]
async fn a_refused_network_policy_means_no_job_is_created() {
    let scenario = json!({"create_error": 403, "refuse": "networkpolicies"});
    let Some((ran, cluster)) = run_in(scenario, Duration::from_secs(30), 4096).await else {
        return;
    };
    let error = ran.unwrap_err();
    assert!(
        error.to_string().contains("networkpolicies is forbidden"),
        "{error}"
    );
    // kubectl would have created the Job of a List whose policy was refused.
    assert!(
        !cluster.created().contains(&"jobs".to_owned()),
        "{:?}",
        cluster.created()
    );
    assert!(cluster.names("jobs.batch").is_empty());
}

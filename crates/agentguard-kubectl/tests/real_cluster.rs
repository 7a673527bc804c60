//! The Docker e2e's isolation probes on a real cluster, for what kmock cannot show (pods
//! running, NetworkPolicy enforced, limits applied). Runs only with
//! `AGENTGUARD_TEST_KUBECONFIG` set (no cluster can run on our CI machines, so CI skips it):
//!
//! - `AGENTGUARD_TEST_KUBECONFIG`: the kubeconfig of a disposable cluster with an enforcing CNI;
//! - `AGENTGUARD_TEST_K8S_NAMESPACE`: an existing namespace to use (default `agentguard-e2e`);
//! - `AGENTGUARD_TEST_K8S_PROBE_IMAGE`: a busybox image by digest that the nodes can pull;
//! - `AGENTGUARD_TEST_K8S_PROXY_IMAGE`: an image by digest with `agentguard` on its PATH;
//! - `AGENTGUARD_TEST_K8S_RUNTIME_CLASS`: optional, a RuntimeClass with handler runsc;
//! - for the egress and route runs, `AGENTGUARD_TEST_K8S_CURL_IMAGE` (an image by digest with
//!   `curl` and `sh`), `AGENTGUARD_TEST_K8S_ALLOWED_URL` and `AGENTGUARD_TEST_K8S_DENIED_URL`
//!   (https URLs the cluster can reach, the first's host allowlisted, the second's not), and
//!   `AGENTGUARD_TEST_K8S_ROUTE_UPSTREAM` (an https base URL that answers 200 on `/`); the
//!   route run creates and deletes the Secret `agentguard-e2e-route` itself.
//!
//! `cargo test -p agentguard-kubectl --test real_cluster -- --test-threads=1`

use std::collections::BTreeMap;
use std::time::Duration;

use agentguard_container::doctor::Level;
use agentguard_container::{ContainerSpec, RunStatus};
use agentguard_k8s::{EgressPlan, K8sSettings, RouteGrant, RunNetwork, RunRequest, Weakened};
use agentguard_kubectl::{Kubectl, Ran, doctor, gc, run};

/// The probe script of the Docker e2e.
const PROBE: &str = include_str!("../../../tests/e2e/probe.sh");

struct Real {
    kubectl: Kubectl,
    settings: K8sSettings,
    probe_image: String,
}

fn real(test: &str) -> Option<Real> {
    let Some(kubeconfig) = std::env::var_os("AGENTGUARD_TEST_KUBECONFIG") else {
        eprintln!("!!!!! SKIPPED real-cluster {test}: AGENTGUARD_TEST_KUBECONFIG is not set !!!!!");
        return None;
    };
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let settings = K8sSettings {
        namespace: var("AGENTGUARD_TEST_K8S_NAMESPACE").unwrap_or_else(|| "agentguard-e2e".into()),
        context: None,
        runtime_class: var("AGENTGUARD_TEST_K8S_RUNTIME_CLASS"),
        workspace_claim: None,
        proxy_image: Some(
            var("AGENTGUARD_TEST_K8S_PROXY_IMAGE").expect("AGENTGUARD_TEST_K8S_PROXY_IMAGE"),
        ),
    };
    let kubectl = Kubectl::new(&settings).with_kubeconfig(kubeconfig);
    let probe_image =
        var("AGENTGUARD_TEST_K8S_PROBE_IMAGE").expect("AGENTGUARD_TEST_K8S_PROBE_IMAGE");
    Some(Real {
        kubectl,
        settings,
        probe_image,
    })
}

impl Real {
    async fn run(&self, name: &str, argv: &[&str]) -> Ran {
        self.run_in(&self.probe_image, name, argv, RunNetwork::None, None)
            .await
    }

    async fn run_in(
        &self,
        image: &str,
        name: &str,
        argv: &[&str],
        network: RunNetwork,
        sink: Option<std::sync::Arc<dyn agentguard_audit::AuditSink>>,
    ) -> Ran {
        let mut builder = ContainerSpec::builder(image.to_owned())
            .command(name, argv.iter().copied())
            .env("AGENTGUARD_E2E_CONFIGURED", "yes")
            .timeout(Duration::from_secs(180));
        if self.settings.runtime_class.is_some() {
            builder = builder.runtime("runsc");
        }
        let spec = builder.build().unwrap();
        let run_id = format!("agentguard-e2e-{}-{name}", std::process::id());
        let labels = [gc::host_label()];
        let invocation = spec.commands().invoke(name, &[]).unwrap();
        let request = RunRequest {
            spec: &spec,
            invocation: &invocation,
            run_id: &run_id,
            labels: &labels,
            network,
            workspace_rw: false,
        };
        run(&self.kubectl, &self.settings, &request, Weakened::ALL, sink)
            .await
            .expect("the run")
            .expect("every weakening is accepted")
    }
}

#[tokio::test]
async fn on_a_real_cluster_doctor_passes_and_the_probe_sees_the_defaults() {
    let Some(real) = real("probe") else {
        return;
    };
    let gvisor = real.settings.runtime_class.is_some();
    let findings = doctor::diagnose(
        &real.kubectl,
        &real.settings,
        gvisor,
        Weakened::ALL,
        &[gc::host_label()],
    )
    .await;
    let fails: Vec<_> = findings
        .iter()
        .filter(|f| f.level == Level::Fail)
        .map(|f| &f.what)
        .collect();
    assert!(fails.is_empty(), "{fails:#?}");
    let ran = real.run("probe", &["sh", "-c", PROBE]).await;
    assert_eq!(
        ran.result.exit_code,
        Some(0),
        "{:?}",
        String::from_utf8_lossy(&ran.result.stdout)
    );
    // The relay's receipt held inside the pod, and was taken off the output.
    let receipt = ran.receipt.as_ref().expect("a receipt");
    assert!(receipt.passed, "{receipt:?}");
    assert!(
        receipt.checks["ids"].starts_with("uid 65534/"),
        "{receipt:?}"
    );
    let text = String::from_utf8_lossy(&ran.result.stdout).into_owned();
    let seen: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |key: &str| {
        seen.get(key)
            .copied()
            .unwrap_or("<missing>")
            .trim()
            .to_owned()
    };
    assert_eq!(get("uid"), "65534", "{text}");
    assert_eq!(get("gid"), "65534", "{text}");
    assert_eq!(get("capeff"), "0000000000000000", "{text}");
    assert!(
        get("root_write").contains("Read-only file system"),
        "{text}"
    );
    assert_eq!(get("tmp_write"), "allowed", "{text}");
    let tmp: u64 = get("tmp_cap").parse().unwrap_or(u64::MAX);
    assert!(tmp <= 64 << 20, "/tmp holds at most 64 MiB: {text}");
    assert_eq!(get("env_canary"), "absent", "{text}");
    assert_eq!(get("env_configured"), "yes", "{text}");
    assert_eq!(get("done"), "1", "{text}");
}

#[tokio::test]
async fn on_a_real_cluster_exit_codes_and_the_memory_limit_hold_and_nothing_is_left() {
    let Some(real) = real("limits") else {
        return;
    };
    let ran = real.run("seven", &["sh", "-c", "exit 7"]).await;
    assert_eq!(
        (ran.result.status, ran.result.exit_code),
        (RunStatus::Exited, Some(7))
    );
    let ran = real
        .run(
            "hog",
            &["sh", "-c", "head -c 900m /dev/zero | tail > /dev/null"],
        )
        .await;
    assert_eq!(ran.result.status, RunStatus::Killed, "{:?}", ran.result);
    assert_eq!(ran.result.exit_code, Some(137));
    let jobs = real
        .kubectl
        .list(
            "jobs.batch",
            &[("app.kubernetes.io/managed-by", "agentguard")],
        )
        .await
        .unwrap();
    let prefix = format!("agentguard-e2e-{}-", std::process::id());
    let mine: Vec<_> = jobs
        .iter()
        .filter_map(|j| j["metadata"]["name"].as_str())
        .filter(|name| name.starts_with(&prefix))
        .collect();
    assert!(mine.is_empty(), "{mine:?}");
}

/// The variable `name`, which the egress and route runs need.
fn needed(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is needed for the egress and route runs"))
}

fn host_of(url: &str) -> String {
    let rest = url.strip_prefix("https://").expect("an https URL");
    rest.split(['/', ':']).next().unwrap_or_default().to_owned()
}

fn plan(hosts: Vec<String>, routes: Vec<RouteGrant>) -> RunNetwork {
    RunNetwork::Egress(EgressPlan {
        hosts,
        ports: vec![443],
        cidrs: vec![],
        proxy_port: 3128,
        proxy_address: None,
        routes,
    })
}

#[tokio::test]
async fn on_a_real_cluster_the_proxy_lets_through_the_allowlisted_host_only() {
    let Some(real) = real("egress") else {
        return;
    };
    let (allowed, denied) = (
        needed("AGENTGUARD_TEST_K8S_ALLOWED_URL"),
        needed("AGENTGUARD_TEST_K8S_DENIED_URL"),
    );
    let script = format!(
        "curl -sS -o /dev/null -w 'allowed=%{{http_code}}\\n' {allowed}; curl -sS -o /dev/null {denied} || echo denied=refused"
    );
    let sink = std::sync::Arc::new(agentguard_audit::MemorySink::default());
    let ran = real
        .run_in(
            &needed("AGENTGUARD_TEST_K8S_CURL_IMAGE"),
            "egress",
            &["sh", "-c", &script],
            plan(vec![host_of(&allowed)], vec![]),
            Some(sink.clone()),
        )
        .await;
    let text = String::from_utf8_lossy(&ran.result.stdout).into_owned();
    assert!(text.contains("denied=refused"), "{text}");
    assert!(!text.contains("allowed=000"), "{text}");
    let proxy = ran.proxy.expect("the proxy's stream");
    assert!(proxy.summary.complete(), "{:?}", proxy.summary);
    let reasons: Vec<String> = sink.records().iter().map(|r| r.reason.clone()).collect();
    assert!(
        reasons.iter().any(|r| r == "domain_not_allowed"),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn on_a_real_cluster_a_route_uses_a_secret_only_the_proxy_pod_mounts() {
    let Some(real) = real("route") else {
        return;
    };
    let upstream = needed("AGENTGUARD_TEST_K8S_ROUTE_UPSTREAM");
    let value = format!("e2e-route-{}", std::process::id());
    let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "agentguard-e2e-route"}, "stringData": {"token": value}});
    real.kubectl.create(&[secret]).await.unwrap();
    let grant = RouteGrant {
        name: "api".into(),
        env: Some("API_URL".into()),
        secret_name: "agentguard-e2e-route".into(),
        secret_key: "token".into(),
        upstream_port: 443,
        cidrs: vec![],
        table: serde_json::json!({"upstream": upstream, "secret": "api", "header": "Authorization", "value": "Bearer {secret}"}),
    };
    let sink = std::sync::Arc::new(agentguard_audit::MemorySink::default());
    let ran = real
        .run_in(
            &needed("AGENTGUARD_TEST_K8S_CURL_IMAGE"),
            "route",
            &["sh", "-c", "curl -sS -o /dev/null -w 'route=%{http_code}\\n' \"$API_URL/\"; env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"],
            plan(vec![], vec![grant]),
            Some(sink.clone()),
        )
        .await;
    real.kubectl
        .delete("secret", "agentguard-e2e-route")
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&ran.result.stdout).into_owned();
    assert!(text.contains("route=200"), "{text}");
    assert!(
        !text.contains(&value),
        "the secret reached the sandbox: {text}"
    );
    let routed: Vec<_> = sink
        .records()
        .into_iter()
        .filter(|r| r.kind == agentguard_audit::Kind::EgressRoute)
        .collect();
    assert_eq!(routed.len(), 1, "{routed:?}");
    assert_eq!(routed[0].reason, "ok");
}

//! The Docker e2e's isolation probes on a real cluster, for what kmock cannot show (pods
//! running, NetworkPolicy enforced, limits applied). Runs only with
//! `AGENTGUARD_TEST_KUBECONFIG` set (no cluster can run on our CI machines, so CI skips it):
//!
//! - `AGENTGUARD_TEST_KUBECONFIG`: the kubeconfig of a disposable cluster with an enforcing CNI;
//! - `AGENTGUARD_TEST_K8S_NAMESPACE`: an existing namespace to use (default `agentguard-e2e`);
//! - `AGENTGUARD_TEST_K8S_PROBE_IMAGE`: a busybox image by digest that the nodes can pull;
//! - `AGENTGUARD_TEST_K8S_PROXY_IMAGE`: an image by digest with `agentguard` on its PATH;
//! - `AGENTGUARD_TEST_K8S_RUNTIME_CLASS`: optional, a RuntimeClass with handler runsc.
//!
//! `cargo test -p agentguard-kubectl --test real_cluster -- --test-threads=1`

use std::collections::BTreeMap;
use std::time::Duration;

use agentguard_container::doctor::Level;
use agentguard_container::{ContainerSpec, RunStatus};
use agentguard_k8s::{K8sSettings, RunNetwork, RunRequest, Weakened};
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
        let mut builder = ContainerSpec::builder(self.probe_image.clone())
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
            network: RunNetwork::None,
            workspace_rw: false,
        };
        run(&self.kubectl, &self.settings, &request, Weakened::ALL, None)
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

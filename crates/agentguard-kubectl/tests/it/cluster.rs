//! The scripted cluster: `tests/kmock_cluster.py` under the venv's Python, a kubeconfig for
//! it, and what its clients created.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentguard_kubectl::Kubectl;
use serde_json::Value;

/// Set by `cargo xtask ci`: a missing emulator is a failure, not a skip.
const REQUIRE: &str = "AGENTGUARD_REQUIRE_KMOCK";
/// Another Python with `kmock` installed.
const PYTHON: &str = "AGENTGUARD_KMOCK_PYTHON";

pub(crate) struct Cluster {
    child: Child,
    _stdin: ChildStdin,
    dir: tempfile::TempDir,
    created: Arc<Mutex<Vec<String>>>,
}

fn python() -> PathBuf {
    std::env::var_os(PYTHON)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/xtask/venv-k8s/bin/python")
        })
}

impl Cluster {
    /// The cluster playing `scenario`, or `None` (a loud skip) without the venv or kubectl.
    pub(crate) fn start(scenario: Value) -> Option<Cluster> {
        let python = python();
        let kubectl = Command::new("kubectl")
            .args(["version", "--client", "-o", "json"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !python.exists() || !kubectl {
            let why = format!(
                "kubectl on PATH: {kubectl}; kmock's Python at {}: {} (run `cargo xtask setup`)",
                python.display(),
                python.exists()
            );
            assert!(
                std::env::var_os(REQUIRE).is_none(),
                "{REQUIRE} is set but {why}"
            );
            eprintln!("!!!!! SKIPPED kubectl executor test: {why} !!!!!");
            return None;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kmock_cluster.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(scenario.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the kmock cluster");
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let url = first
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("the cluster's first line: {first:?}"))
            .to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let created = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&created);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("created ") {
                    let plural = rest.split(' ').next().unwrap_or_default().to_owned();
                    sink.lock().unwrap().push(plural);
                }
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: kmock, cluster: {{server: \"{url}\"}}}}]\nusers: [{{name: tests, user: {{}}}}]\ncontexts: [{{name: kmock, context: {{cluster: kmock, user: tests}}}}]\ncurrent-context: kmock\n"
        );
        std::fs::write(dir.path().join("kubeconfig"), config).unwrap();
        Some(Cluster {
            child,
            _stdin: stdin,
            dir,
            created,
        })
    }

    /// kubectl for this cluster, in the tests' namespace.
    pub(crate) fn kubectl(&self) -> Kubectl {
        Kubectl::new(&crate::settings()).with_kubeconfig(self.dir.path().join("kubeconfig"))
    }

    /// The plurals of the objects clients created, in order.
    pub(crate) fn created(&self) -> Vec<String> {
        self.created.lock().unwrap().clone()
    }

    /// Waits (10 s at most) until no Job, Deployment, Service or NetworkPolicy is named `name`.
    pub(crate) async fn assert_gone(&self, name: &str) {
        let kubectl = self.kubectl();
        let kinds = [
            "jobs.batch",
            "deployments.apps",
            "services",
            "networkpolicies.networking.k8s.io",
        ];
        let mut left = Vec::new();
        for _ in 0..100 {
            left.clear();
            for kind in kinds {
                if kubectl.get(kind, name).await.unwrap().is_some() {
                    left.push(kind);
                }
            }
            if left.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{name} is still there as {left:?}");
    }

    /// Returns once the run's pod is running.
    pub(crate) async fn until_running(&self, run: &str) {
        let kubectl = self.kubectl();
        loop {
            let pods = kubectl
                .list("pods", &[("batch.kubernetes.io/job-name", run)])
                .await
                .unwrap();
            if pods.iter().any(|p| p["status"]["phase"] == "Running") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The Job `name` as soon as it exists.
    pub(crate) async fn job_when_created(&self, name: &str) -> Value {
        let kubectl = self.kubectl();
        loop {
            if let Some(job) = kubectl.get("jobs.batch", name).await.unwrap() {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! A scripted Kubernetes API for the kubectl executor's tests: `kmock_cluster.py` (kmock's
//! in-memory emulator and a small controller) under the Python of the venv `cargo xtask setup`
//! makes, on 127.0.0.1, a kubeconfig for it, and what its clients created. Without the venv or
//! kubectl, [`KmockCluster::start`] prints a loud SKIPPED line and returns `None`, unless
//! `AGENTGUARD_REQUIRE_KMOCK` is set (`cargo xtask ci` sets it): then it panics.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Set by `cargo xtask ci`: a missing emulator is a failure, not a skip.
pub const REQUIRE_KMOCK: &str = "AGENTGUARD_REQUIRE_KMOCK";
/// Another Python with `kmock` installed.
const PYTHON: &str = "AGENTGUARD_KMOCK_PYTHON";
/// The fixture, written next to the kubeconfig at start.
const SCRIPT: &str = include_str!("kmock_cluster.py");

/// The scripted cluster; stopped on drop.
pub struct KmockCluster {
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

/// A loud skip of `test` for `why`, or a panic when [`REQUIRE_KMOCK`] is set.
fn skip<T>(test: &str, why: &str) -> Option<T> {
    assert!(
        std::env::var_os(REQUIRE_KMOCK).is_none(),
        "{REQUIRE_KMOCK} is set but {why}"
    );
    eprintln!("!!!!! SKIPPED {test}: {why} !!!!!");
    None
}

/// The Python of the Kubernetes tools' venv (kmock, kubernetes-validate and its PyYAML, a
/// YAML 1.1 reader), or `None` (a loud skip, a failure under [`REQUIRE_KMOCK`]).
pub fn k8s_python(test: &str) -> Option<PathBuf> {
    let python = python();
    if python.exists() {
        return Some(python);
    }
    skip(
        test,
        &format!(
            "no Python at {} (run `cargo xtask setup`)",
            python.display()
        ),
    )
}

impl KmockCluster {
    /// The cluster playing `scenario` (JSON; the keys are in `kmock_cluster.py`), or `None`
    /// (a loud skip) without the venv or kubectl. `test` names the test in the skip line.
    pub fn start(test: &str, scenario: &str) -> Option<KmockCluster> {
        let python = k8s_python(test)?;
        let kubectl = Command::new("kubectl")
            .args(["version", "--client", "-o", "json"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !kubectl {
            return skip(test, "kubectl is not on PATH (run `cargo xtask setup`)");
        }
        let dir = tempfile::tempdir().expect("a folder for the cluster");
        let script = dir.path().join("kmock_cluster.py");
        std::fs::write(&script, SCRIPT).expect("writing the fixture");
        let mut child = Command::new(python)
            .arg(script)
            .arg(scenario)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the kmock cluster");
        let stdin = child.stdin.take().expect("stdin");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        // The objects the fixture seeds are announced before it listens: not the clients'.
        let url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("listening ").map(str::to_owned))
            .expect("the cluster never said where it listens");
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let created = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&created);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("created ") {
                    let plural = rest.split(' ').next().unwrap_or_default().to_owned();
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push(plural);
                }
            }
        });
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: kmock, cluster: {{server: \"{url}\"}}}}]\nusers: [{{name: tests, user: {{}}}}]\ncontexts: [{{name: kmock, context: {{cluster: kmock, user: tests}}}}]\ncurrent-context: kmock\n"
        );
        std::fs::write(dir.path().join("kubeconfig"), config).expect("writing the kubeconfig");
        Some(KmockCluster {
            child,
            _stdin: stdin,
            dir,
            created,
        })
    }

    /// The kubeconfig that points kubectl at this cluster.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// The plurals of the objects clients created, in order.
    pub fn created(&self) -> Vec<String> {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `kubectl --kubeconfig K --namespace agentguard ARGS`: its stdout, or its stderr as the error.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(["--namespace", "agentguard"])
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The names of `resource` in the namespace that exist now.
    pub fn names(&self, resource: &str) -> Vec<String> {
        self.kubectl(&["get", resource, "-o", "name"])
            .unwrap_or_default()
            .lines()
            .map(|l| l.rsplit('/').next().unwrap_or_default().to_owned())
            .collect()
    }

    /// Waits (10 s at most) until no Job, Deployment, Service or NetworkPolicy is named `name`.
    pub fn assert_gone(&self, name: &str) {
        let kinds = [
            "jobs.batch",
            "deployments.apps",
            "services",
            "networkpolicies.networking.k8s.io",
        ];
        let mut left = Vec::new();
        for _ in 0..100 {
            left = kinds
                .iter()
                .filter(|kind| self.names(kind).iter().any(|n| n == name))
                .collect();
            if left.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{name} is still there as {left:?}");
    }

    /// Waits (30 s at most) until `resource/name` exists and returns it as JSON text.
    pub fn wait_for(&self, resource: &str, name: &str) -> String {
        for _ in 0..600 {
            if let Ok(text) =
                self.kubectl(&["get", resource, name, "--ignore-not-found", "-o", "json"])
                && !text.trim().is_empty()
            {
                return text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{resource}/{name} never appeared");
    }

    /// Waits (30 s at most) until a pod of Job `job` is running.
    pub fn wait_running(&self, job: &str) {
        let selector = format!("batch.kubernetes.io/job-name={job}");
        for _ in 0..600 {
            let phases = self
                .kubectl(&[
                    "get",
                    "pods",
                    "-l",
                    &selector,
                    "-o",
                    "jsonpath={.items[*].status.phase}",
                ])
                .unwrap_or_default();
            if phases.contains("Running") {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no pod of {job} ever ran");
    }
}

impl Drop for KmockCluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

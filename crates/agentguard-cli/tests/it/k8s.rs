//! `engine = "kubernetes"` in the CLI: `agentguard k8s manifests` prints the objects as YAML
//! documents (the compiler's goldens are in agentguard-k8s; CI validates them with
//! kubernetes-validate and checkov), names the weakened defaults and whether they are
//! accepted, and refuses what cannot be mapped.

use std::path::Path;

use crate::{agentguard, stderr, stdout};

const BASE: &str = r#"image = "localhost/tools@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
engine = "kubernetes"
timeout = 120

[kubernetes]
namespace = "agentguard"
workspace_claim = "ws-claim"
proxy_image = "localhost/agentguard@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
accept_weakened = ["tmp_noexec"]

[egress]
allow = ["pkgs.example.com"]

[commands]
run_tests = ["python3", "-m", "pytest", "-q"]

[commands.install]
argv = ["pip", "install", "-r", "requirements.txt"]
network = "egress"
"#;

fn config(dir: &Path, text: &str) -> String {
    let path = dir.join("agentguard.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn manifests_prints_the_objects_and_names_what_is_weakened() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), BASE);
    let out = agentguard(&["k8s", "manifests", "--config", &cfg, "run_tests"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        text.matches("---\n").count(),
        2,
        "a NetworkPolicy and the Job: {text}"
    );
    assert!(text.contains("kind: \"Job\"") && text.contains("kind: \"NetworkPolicy\""));
    assert!(text.contains("- \"python3\"") && text.contains("claimName: \"ws-claim\""));
    let err = stderr(&out);
    assert!(
        err.contains("`tmp_noexec` is weakened")
            && err.contains("accepted by [kubernetes] accept_weakened"),
        "{err}"
    );
    assert!(
        err.contains("`pids` is weakened") && err.contains("NOT accepted"),
        "{err}"
    );
    let egress = stdout(&agentguard(&[
        "k8s",
        "manifests",
        "--config",
        &cfg,
        "install",
    ]));
    assert_eq!(
        egress.matches("---\n").count(),
        5,
        "the proxy's three objects too"
    );
    assert!(
        egress.contains("kind: \"Deployment\"") && egress.contains("http://PROXY_CLUSTER_IP:3128")
    );
}

#[test]
fn what_a_cluster_cannot_do_is_refused_with_the_key_to_set() {
    let dir = tempfile::tempdir().unwrap();
    for (from, to, needle) in [
        (
            "namespace = \"agentguard\"",
            "namespace = \"Agent_Guard\"",
            "`kubernetes.namespace` value \"Agent_Guard\"",
        ),
        (
            "accept_weakened = [\"tmp_noexec\"]",
            "accept_weakened = [\"network\"]",
            "is not a weakening",
        ),
        (
            "timeout = 120",
            "timeout = 120\nruntime = \"runsc\"",
            "[kubernetes] runtime_class",
        ),
        (
            "proxy_image = ",
            "# proxy_image = ",
            "kubernetes.proxy_image: is required: every run's pod takes its isolation receipt",
        ),
    ] {
        let cfg = config(dir.path(), &BASE.replace(from, to));
        let out = agentguard(&["k8s", "manifests", "--config", &cfg, "run_tests"]);
        assert_eq!(out.status.code(), Some(2), "{to}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{to}: {}", stderr(&out));
    }
    let off_list = agentguard(&[
        "k8s",
        "manifests",
        "--config",
        &config(dir.path(), BASE),
        "rm",
    ]);
    assert_eq!(off_list.status.code(), Some(123), "{}", stderr(&off_list));
    let local = config(
        dir.path(),
        &BASE.replace("engine = \"kubernetes\"", "engine = \"docker\""),
    );
    let out = agentguard(&["k8s", "manifests", "--config", &local, "run_tests"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("only read with engine = \"kubernetes\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_weakening_not_accepted_refuses_the_run_before_kubectl_is_called() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), BASE);
    // kubectl, if it were called, would find no cluster here.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["run", "--config", &cfg, "run_tests"])
        .env("KUBECONFIG", dir.path().join("none"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`pids` is weakened")
            && err.contains("accept_weakened")
            && err.contains("Nothing was created"),
        "{err}"
    );
}

#[test]
fn a_dry_run_on_a_cluster_prints_the_manifests_without_calling_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), BASE);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["run", "--config", &cfg, "run_tests", "--dry-run"])
        .env("KUBECONFIG", dir.path().join("none"))
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("kind: \"NetworkPolicy\"") && text.contains("kind: \"Job\""),
        "{text}"
    );
    assert!(text.contains("agentguard.dev/host"), "{text}");
}

/// A `test_file` command whose path param is checked lexically only.
const PARAMS: &str = r#"
[commands.test_file]
argv = ["python3", "-m", "pytest", "-q", "{path}"]

[commands.test_file.params.path]
type = "path"
under = "tests"
"#;

#[test]
fn a_job_gets_the_substituted_argv_and_a_refused_value_never_reaches_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &format!("{BASE}{PARAMS}"));
    let out = agentguard(&[
        "k8s",
        "manifests",
        "--config",
        &cfg,
        "test_file",
        "path=tests/test_api.py",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let yaml = stdout(&out);
    assert!(
        yaml.contains("- \"-q\"\n        - \"/workspace/tests/test_api.py\"\n"),
        "the Job's command has the placed value: {yaml}"
    );
    for args in [
        &[
            "k8s",
            "manifests",
            "--config",
            &cfg,
            "test_file",
            "path=../x",
        ][..],
        &["run", "--config", &cfg, "test_file", "path=../x"],
    ] {
        let out = agentguard(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("(rule traversal;"),
            "{}",
            stderr(&out)
        );
        // kubectl is not on this machine's PATH in tests: reaching it would be another error.
        assert!(!stderr(&out).contains("kubectl"), "{}", stderr(&out));
    }
}

#[test]
fn a_host_check_is_refused_at_load_on_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    for key in ["must_exist = true", "kind = \"file\""] {
        let text = format!("{BASE}{PARAMS}{key}\n");
        let cfg = config(dir.path(), &text);
        let out = agentguard(&["k8s", "manifests", "--config", &cfg, "run_tests"]);
        assert_eq!(out.status.code(), Some(2), "{key}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "commands.test_file.params.path: must_exist and kind are checked on this host"
            ),
            "{key}: {}",
            stderr(&out)
        );
    }
}

const ROUTE: &str = r#"
[secrets]
api = { k8s_secret = "api-token/token" }

[routes.api]
upstream = "https://api.example.com:8443/v1"
secret = "api"
header = "Authorization"
value = "Bearer {secret}"
env = "API_URL"

[commands.call]
argv = ["python3", "call.py"]
network = "egress"
routes = ["api"]
"#;

#[test]
fn a_route_on_a_cluster_mounts_its_secret_into_the_proxy_pod_only() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &format!("{BASE}{ROUTE}"));
    let out = agentguard(&["k8s", "manifests", "--config", &cfg, "call"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let documents: Vec<&str> = text.split("---\n").filter(|d| !d.is_empty()).collect();
    for document in &documents {
        let names_secret = document.contains("api-token");
        let is_proxy = document.contains("kind: \"Deployment\"");
        assert_eq!(
            names_secret, is_proxy,
            "only the proxy Deployment names the Secret: {document}"
        );
    }
    let job = documents
        .iter()
        .find(|d| d.contains("kind: \"Job\""))
        .unwrap();
    assert!(job.contains("http://PROXY_CLUSTER_IP:3128/api"), "{job}");
    assert!(!job.contains("secret"), "{job}");
    // The route's upstream port is the proxy's to dial.
    assert!(text.contains("port: 8443"), "{text}");
    // What a cluster cannot hold: a secret of this machine, a bad reference, a CA file.
    for (from, to, needle) in [
        (
            "api = { k8s_secret = \"api-token/token\" }",
            "api = { env = \"API_TOKEN\" }",
            "k8s_secret = \"NAME/KEY\"",
        ),
        (
            "api = { k8s_secret = \"api-token/token\" }",
            "api = { k8s_secret = \"Api_Token/token\" }",
            "not a Secret name",
        ),
        (
            "api = { k8s_secret = \"api-token/token\" }",
            "api = { k8s_secret = \"api-token\" }",
            "not NAME/KEY",
        ),
        (
            "env = \"API_URL\"",
            "env = \"API_URL\"\nca_file = \"ca.pem\"",
            "routes.api.ca_file",
        ),
    ] {
        let cfg = config(dir.path(), &format!("{BASE}{}", ROUTE.replace(from, to)));
        let out = agentguard(&["k8s", "manifests", "--config", &cfg, "call"]);
        assert_eq!(out.status.code(), Some(2), "{to}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{to}: {}", stderr(&out));
    }
}

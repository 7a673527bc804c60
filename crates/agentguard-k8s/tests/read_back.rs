//! What a YAML 1.1 reader (PyYAML, in the venv `cargo xtask setup` makes) reads from
//! `yaml::documents` is exactly the JSON it was written from: the objects of real runs (no
//! network, egress with a credential route, gVisor with a read-write claim), and a document
//! of the keys and values YAML 1.1 reads as other types or breaks lines at. Without the venv
//! the test is SKIPPED loudly; `cargo xtask ci` makes the skip a failure.

use agentguard_container::ContainerSpec;
use agentguard_k8s::{EgressPlan, K8sSettings, RouteGrant, RunNetwork, RunRequest, compile, yaml};
use serde_json::{Value, json};

fn documents(runtime: Option<&str>, network: RunNetwork, workspace_rw: bool) -> Vec<Value> {
    let mut builder = ContainerSpec::builder(format!("localhost/tools@sha256:{}", "a".repeat(64)))
        .command("on", ["python3", "-c", "print('yes: no')"])
        .env("NULL", "~")
        .env("Y", "on");
    if let Some(runtime) = runtime {
        builder = builder.runtime(runtime);
    }
    let spec = builder.build().unwrap();
    let settings = K8sSettings {
        namespace: "agentguard".into(),
        context: None,
        runtime_class: Some("gvisor".into()),
        workspace_claim: Some("ws-claim".into()),
        proxy_image: Some(format!("localhost/agentguard@sha256:{}", "b".repeat(64))),
    };
    let invocation = spec.commands().invoke("on", &[]).unwrap();
    let labels = vec![("agentguard.owner".to_owned(), "443".to_owned())];
    let request = RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: "agentguard-1-2-3",
        labels: &labels,
        network,
        workspace_rw,
    };
    compile(&request, &settings).unwrap().documents()
}

#[test]
fn a_yaml_1_1_reader_reads_back_exactly_the_values_written() {
    let Some(python) = agentguard_test_support::k8s_python("yaml read back") else {
        return;
    };
    let route = RouteGrant {
        name: "api".into(),
        env: Some("API_URL".into()),
        secret_name: "api-token".into(),
        secret_key: "token".into(),
        upstream_port: 8443,
        cidrs: vec![],
        table: json!({"upstream": "https://api.example.com:8443/", "secret": "api", "header": "Authorization", "value": "Bearer {secret}"}),
    };
    let egress = RunNetwork::Egress(EgressPlan {
        hosts: vec!["pkgs.example.com".into()],
        ports: vec![443],
        cidrs: vec![],
        proxy_port: 3128,
        proxy_address: None,
        routes: vec![route],
    });
    let mut written = documents(None, RunNetwork::None, false);
    written.extend(documents(None, egress, false));
    written.extend(documents(Some("runsc"), RunNetwork::None, true));
    written.push(json!({
        "on": "off", "yes": "no", "y": "n", "null": "~", "443": "0x1F", "1.5": "1e3",
        "+1": "-.inf", "": "", "no-op": ".nan", "a\u{2028}b": "x\u{85}y\u{2029}",
        "list": ["true", true, null, "null", 0, "0o17", "2026-12-03", "- item", "#", "a: b"],
        "nested": {"key with spaces": {"": []}, "tab\tkey": "\"quoted\" \\ back"},
    }));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.yaml");
    std::fs::write(&path, yaml::documents(&written)).unwrap();
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1], encoding='utf-8')))))",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(read.len(), written.len());
    for (read, written) in read.iter().zip(&written) {
        assert_eq!(read, written);
    }
}

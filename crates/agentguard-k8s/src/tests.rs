//! Golden manifests for every combination (network none/egress x runc/runsc x read-only or
//! read-write workspace claim), and the seed defaults checked on every generated pod.
//! Regenerate with `UPDATE_GOLDEN=1 cargo test -p agentguard-k8s`, then review the diff: every
//! changed line is a changed security property. CI validates the goldens with
//! kubernetes-validate and checkov (xtask).

use std::path::Path;

use agentguard_container::ContainerSpec;
use serde_json::Value;

use crate::*;

mod routes;

fn spec(runtime: Option<&str>) -> ContainerSpec {
    let mut builder = ContainerSpec::builder(format!("localhost/tools@sha256:{}", "a".repeat(64)))
        .command("run_tests", ["python3", "-m", "pytest", "-q"])
        .env("CI", "1");
    if let Some(runtime) = runtime {
        builder = builder.runtime(runtime);
    }
    builder.build().unwrap()
}

fn settings() -> K8sSettings {
    K8sSettings {
        namespace: "agentguard".into(),
        context: None,
        runtime_class: Some("gvisor".into()),
        workspace_claim: Some("ws-claim".into()),
        proxy_image: Some(format!("localhost/agentguard@sha256:{}", "b".repeat(64))),
    }
}

fn egress() -> RunNetwork {
    egress_with(vec![])
}

fn egress_with(routes: Vec<RouteGrant>) -> RunNetwork {
    RunNetwork::Egress(EgressPlan {
        hosts: vec!["pkgs.example.com".into()],
        ports: vec![443],
        cidrs: vec![],
        proxy_port: 3128,
        proxy_address: None,
        routes,
    })
}

/// Every combination: (file stem, runtime, network, rw).
fn combinations() -> Vec<(String, Option<&'static str>, RunNetwork, bool)> {
    let mut all = Vec::new();
    for (net_name, network) in [("none", RunNetwork::None), ("egress", egress())] {
        for runtime in [None, Some("runsc")] {
            for rw in [false, true] {
                let stem = format!(
                    "{net_name}-{}-{}",
                    runtime.unwrap_or("runc"),
                    if rw { "rw" } else { "ro" }
                );
                all.push((stem, runtime, network.clone(), rw));
            }
        }
    }
    // A credential route: its Secret mounted into the proxy pod.
    all.push((
        "egress-route-runc-ro".into(),
        None,
        egress_with(vec![routes::grant()]),
        false,
    ));
    all
}

fn compiled(runtime: Option<&str>, network: RunNetwork, rw: bool) -> Manifests {
    let spec = spec(runtime);
    let labels = vec![("agentguard.owner".to_owned(), "4242".to_owned())];
    let invocation = spec.commands().invoke("run_tests", &[]).unwrap();
    let request = RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: "agentguard-4242-1-0",
        labels: &labels,
        network,
        workspace_rw: rw,
    };
    compile(&request, &settings()).unwrap()
}

#[test]
fn golden_manifests_for_every_combination() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for (stem, runtime, network, rw) in combinations() {
        let text = yaml::documents(&compiled(runtime, network, rw).documents());
        let path = dir.join(format!("{stem}.yaml"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
        assert_eq!(text, want, "{stem} differs from its golden file");
    }
}

/// Every pod template of the manifests.
fn pods(manifests: &Manifests) -> Vec<Value> {
    manifests
        .documents()
        .into_iter()
        .filter(|d| d["kind"] == "Job" || d["kind"] == "Deployment")
        .map(|d| d["spec"]["template"]["spec"].clone())
        .collect()
}

#[test]
fn every_pod_keeps_every_seed_default() {
    for (stem, runtime, network, rw) in combinations() {
        let manifests = compiled(runtime, network.clone(), rw);
        for pod in pods(&manifests) {
            let at = |what: &str| format!("{stem}: {what}");
            assert_eq!(
                pod["automountServiceAccountToken"],
                false,
                "{}",
                at("no token")
            );
            assert_eq!(
                pod["enableServiceLinks"],
                false,
                "{}",
                at("no service links")
            );
            for host in ["hostNetwork", "hostPID", "hostIPC"] {
                assert_eq!(pod[host], false, "{}", at(host));
            }
            assert_eq!(
                pod["securityContext"]["runAsNonRoot"],
                true,
                "{}",
                at("non-root")
            );
            assert_eq!(pod["securityContext"]["runAsUser"], 65534, "{}", at("uid"));
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault"
            );
            let init = pod["initContainers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for c in pod["containers"].as_array().unwrap().iter().chain(&init) {
                let sc = &c["securityContext"];
                assert_eq!(sc["readOnlyRootFilesystem"], true, "{}", at("ro root"));
                assert_eq!(
                    sc["allowPrivilegeEscalation"],
                    false,
                    "{}",
                    at("no escalation")
                );
                assert_eq!(sc["privileged"], false);
                assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
                assert_eq!(
                    c["resources"]["requests"],
                    c["resources"]["limits"],
                    "{}",
                    at("requests = limits")
                );
                assert!(
                    c["resources"]["limits"]["memory"].is_string()
                        && c["resources"]["limits"]["cpu"].is_string()
                );
                assert!(
                    c["image"].as_str().unwrap().contains("@sha256:"),
                    "{}",
                    at("pinned image")
                );
            }
        }
        // The sandbox pod itself.
        let job = &manifests.job;
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(job["spec"]["activeDeadlineSeconds"], 300);
        assert!(job["spec"]["ttlSecondsAfterFinished"].is_number());
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Never");
        assert_eq!(
            pod["shareProcessNamespace"], true,
            "{stem}: an init as PID 1"
        );
        assert_eq!(pod["dnsPolicy"], "None", "{stem}: no DNS");
        let tmp = &pod["volumes"][0];
        assert_eq!(
            (tmp["name"].as_str(), tmp["emptyDir"]["medium"].as_str()),
            (Some("tmp"), Some("Memory"))
        );
        assert_eq!(tmp["emptyDir"]["sizeLimit"], "67108864");
        assert_eq!(
            pod["runtimeClassName"].as_str(),
            runtime.map(|_| "gvisor"),
            "{stem}"
        );
        // The relay, written by its init container, is the entrypoint: the receipt first.
        let relay = &pod["initContainers"][0];
        assert_eq!(relay["name"], RELAY_CONTAINER);
        assert_eq!(
            relay["command"],
            serde_json::json!([
                "agentguard",
                "k8s",
                "relay",
                agentguard_container::RELAY_TARGET
            ])
        );
        let run = &pod["containers"][0];
        assert_eq!(
            run["command"],
            serde_json::json!([
                agentguard_container::RELAY_TARGET,
                "--receipt",
                "65534:65534",
                "--cluster",
                "--",
                "python3",
                "-m",
                "pytest",
                "-q"
            ]),
            "{stem}"
        );
        let relay_mount = |c: &Value| {
            c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["mountPath"] == "/run/agentguard")
                .cloned()
                .unwrap()
        };
        assert_eq!(
            relay_mount(run)["readOnly"],
            true,
            "{stem}: the run cannot change it"
        );
        assert_eq!(relay_mount(relay)["readOnly"], false);
        let workspace = &pod["containers"][0]["volumeMounts"][1];
        assert_eq!(
            workspace["readOnly"], !rw,
            "{stem}: the claim is read-only unless rw"
        );
        // The network: deny all, or only the run's proxy on its port.
        let policy = &manifests.network_policy["spec"];
        assert_eq!(
            policy["policyTypes"],
            serde_json::json!(["Ingress", "Egress"])
        );
        assert_eq!(policy["ingress"], serde_json::json!([]));
        match network {
            RunNetwork::None => {
                assert_eq!(policy["egress"], serde_json::json!([]), "{stem}");
                assert!(manifests.proxy.is_none());
            }
            RunNetwork::Egress(_) => {
                let rule = &policy["egress"][0];
                assert_eq!(
                    rule["to"][0]["podSelector"]["matchLabels"][LABEL_PROXY],
                    "agentguard-4242-1-0"
                );
                assert_eq!(
                    rule["ports"],
                    serde_json::json!([{"protocol": "TCP", "port": 3128}])
                );
                assert_eq!(
                    policy["egress"].as_array().unwrap().len(),
                    1,
                    "nothing else, no DNS"
                );
                let env = pod["containers"][0]["env"].as_array().unwrap();
                assert!(
                    env.iter().any(|e| e["name"] == "HTTPS_PROXY"
                        && e["value"] == "http://PROXY_CLUSTER_IP:3128")
                );
                // Empty, but with a route the proxy's own address (routes are reached
                // directly).
                let no_proxy = if stem.contains("route") {
                    "PROXY_CLUSTER_IP"
                } else {
                    ""
                };
                assert!(
                    env.iter()
                        .any(|e| e["name"] == "NO_PROXY" && e["value"] == no_proxy)
                );
            }
        }
        assert_eq!(manifests.weakened, [Weakened::TmpNoexec, Weakened::Pids]);
        assert_eq!(
            job["metadata"]["annotations"]["agentguard.dev/weakened"],
            "tmp_noexec,pids"
        );
    }
}

#[test]
fn what_cannot_be_mapped_is_refused_with_the_key_to_set() {
    let mut no_class = settings();
    no_class.runtime_class = None;
    let spec = spec(Some("runsc"));
    let invocation = spec.commands().invoke("run_tests", &[]).unwrap();
    let request = |network| RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: "agentguard-4242-1-0",
        labels: &[],
        network,
        workspace_rw: false,
    };
    let message = compile(&request(RunNetwork::None), &no_class)
        .unwrap_err()
        .to_string();
    assert!(message.contains("[kubernetes] runtime_class"), "{message}");
    let mut no_image = settings();
    no_image.proxy_image = None;
    let message = compile(&request(egress()), &no_image)
        .unwrap_err()
        .to_string();
    assert!(message.contains("[kubernetes] proxy_image"), "{message}");
    let host = ContainerSpec::builder("localhost/tools:1")
        .command("run_tests", ["true"])
        .workspace("/srv/ws")
        .build()
        .unwrap();
    let request = RunRequest {
        spec: &host,
        ..request(RunNetwork::None)
    };
    let message = compile(&request, &settings()).unwrap_err().to_string();
    assert!(message.contains("workspace_claim"), "{message}");
    let bad = RunRequest {
        run_id: "Not_A_Label",
        ..request
    };
    assert!(compile(&bad, &settings()).is_err());
}

#[test]
fn the_proxy_address_fills_the_proxy_variables_once_known() {
    let mut plan = match egress() {
        RunNetwork::Egress(plan) => plan,
        RunNetwork::None => unreachable!(),
    };
    plan.proxy_address = Some("10.96.0.17".parse().unwrap());
    let manifests = compiled(None, RunNetwork::Egress(plan), false);
    let env = manifests.job["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["value"] == "http://10.96.0.17:3128"),
        "{env}"
    );
}

/// The sandbox's image and the proxy's follow one pull rule: pinned (`@sha256:` or a bare
/// `sha256:<id>`) may be pulled, a tag must be on the node.
#[test]
fn the_proxy_image_gets_the_same_pull_rule_as_the_runs_image() {
    let spec = spec(None);
    let invocation = spec.commands().invoke("run_tests", &[]).unwrap();
    let request = RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: "agentguard-4242-1-0",
        labels: &[],
        network: egress(),
        workspace_rw: false,
    };
    for (image, want) in [
        (
            format!("localhost/agentguard@sha256:{}", "b".repeat(64)),
            "IfNotPresent",
        ),
        (format!("sha256:{}", "c".repeat(64)), "IfNotPresent"),
        ("localhost/agentguard:1".to_owned(), "Never"),
    ] {
        let mut settings = settings();
        settings.proxy_image = Some(image.clone());
        let manifests = compile(&request, &settings).unwrap();
        let deployment = &manifests.proxy.as_ref().unwrap()[1];
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["imagePullPolicy"], want, "{image}");
        let ids = &deployment["spec"]["template"]["spec"]["securityContext"];
        assert_eq!(
            (ids["runAsUser"].as_u64(), ids["runAsGroup"].as_u64()),
            (Some(65534), Some(65534))
        );
    }
}

/// Issue 34, item 12: the kubelet expands `$(VAR)` and turns `$$` into `$` in `command` and
/// `env`, so every `$` is written `$$`: the process gets the value the validator checked.
#[test]
fn a_run_without_the_proxy_image_is_refused_for_its_receipt() {
    let spec = spec(None);
    let invocation = spec.commands().invoke("run_tests", &[]).unwrap();
    let labels = vec![];
    let request = RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: "agentguard-4242-1-0",
        labels: &labels,
        network: RunNetwork::None,
        workspace_rw: false,
    };
    let settings = K8sSettings {
        proxy_image: None,
        ..settings()
    };
    let error = compile(&request, &settings).unwrap_err().to_string();
    assert!(
        error.contains("isolation receipt") && error.contains("proxy_image"),
        "{error}"
    );
}

#[test]
fn r34_12_a_dollar_reaches_the_pod_as_itself() {
    let word = agentguard_policy::ParamSpec {
        kind: "string".into(),
        pattern: Some(r"[A-Za-z$()_ ]+".into()),
        ..agentguard_policy::ParamSpec::default()
    };
    let spec = ContainerSpec::builder(format!("localhost/tools@sha256:{}", "a".repeat(64)))
        .command_with_params(
            "say",
            vec!["echo".into(), "{word}".into()],
            std::collections::BTreeMap::from([("word".to_owned(), word)]),
        )
        .env("GREETING", "$(HOME) costs $$5")
        .build()
        .unwrap();
    let args = [(
        "word".to_owned(),
        agentguard_policy::Arg::Word("$(PYTEST_ADDOPTS) and $$".into()),
    )];
    let invocation = spec.commands().invoke("say", &args).unwrap();
    let labels = vec![];
    let request = RunRequest {
        spec: &spec,
        invocation: &invocation,
        run_id: "agentguard-4242-1-0",
        labels: &labels,
        network: RunNetwork::None,
        workspace_rw: false,
    };
    let manifests = compile(&request, &settings()).unwrap();
    let pod = &pods(&manifests)[0];
    let container = &pod["containers"][0];
    assert_eq!(
        container["command"],
        serde_json::json!([
            agentguard_container::RELAY_TARGET,
            "--receipt",
            "65534:65534",
            "--cluster",
            "--",
            "echo",
            "$$(PYTEST_ADDOPTS) and $$$$"
        ])
    );
    let env = container["env"].as_array().unwrap();
    let greeting = env.iter().find(|e| e["name"] == "GREETING").unwrap();
    assert_eq!(greeting["value"], "$$(HOME) costs $$$$5");
}

#[test]
fn the_proxy_is_ready_by_its_health_on_a_port_no_sandbox_is_let_in_on() {
    let manifests = compiled(None, egress(), false);
    let docs = manifests.documents();
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let metrics = crate::proxy::metrics_port(3128);
    let probe = &container["readinessProbe"]["httpGet"];
    assert_eq!(probe["path"], "/healthz");
    assert_eq!(probe["port"], metrics);
    let argv: Vec<&str> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        argv.contains(&format!("--metrics=0.0.0.0:{metrics}").as_str()),
        "{argv:?}"
    );
    // The proxy's NetworkPolicy lets the run's sandbox in on the proxy port only.
    let policy = docs
        .iter()
        .find(|d| {
            d["kind"] == "NetworkPolicy"
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-proxy"))
        })
        .unwrap();
    let ports: Vec<&Value> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["ports"].as_array().unwrap())
        .collect();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["port"], 3128);
    assert_ne!(crate::proxy::metrics_port(9901), 9901);
}

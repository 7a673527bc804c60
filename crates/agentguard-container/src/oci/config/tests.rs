//! The bundle's `config.json`: every default, golden-tested, and the properties e2e proves
//! from inside asserted on the value itself.

use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::argv::{Relay, RouteVariable};
use crate::engine::Engine;

fn spec(runtime: Option<&str>) -> ContainerSpec {
    let mut builder = ContainerSpec::builder("localhost/tools:latest")
        .engine(Engine::parse("oci").unwrap())
        .command("run_tests", ["python3", "-m", "pytest", "-q"])
        .workspace("/srv/workspace")
        .env("CI", "1")
        .env("PATH", "/opt/tools/bin:/usr/bin:/bin");
    if let Some(runtime) = runtime {
        builder = builder.runtime(runtime);
    }
    builder.build().unwrap()
}

fn identity(relay: bool) -> RunIdentity {
    let run = "/run/user/0/agentguard/agentguard-test-1";
    RunIdentity {
        name: "agentguard-test-1".into(),
        labels: vec![("agentguard.owner".into(), "4242".into())],
        relay: relay.then(|| Relay {
            program: format!("{run}/relay").into(),
            socket: format!("{run}/proxy.sock").into(),
            port: 3128,
            routes: vec![RouteVariable {
                variable: Some("GH_API_URL".into()),
                route: "gh".into(),
            }],
        }),
        masks: None,
        image_id: Some(format!("sha256:{}", "ab".repeat(32))),
        client: None,
        receipt: (!relay).then(|| format!("{run}/relay").into()),
    }
}

fn config(spec: &ContainerSpec, identity: &RunIdentity) -> Result<Value> {
    let invocation = spec.invoke("run_tests", &[]).unwrap();
    let image_env = ["PATH=/image/bin".to_owned(), "LANG=C.UTF-8".to_owned()];
    let input = BundleInput {
        rootfs: Path::new("/var/lib/agentguard/oci/images/abab/rootfs"),
        image_env: &image_env,
        cgroup: "/agentguard/agentguard-test-1".into(),
        seccomp: oci_spec::runtime::LinuxSeccomp::default(),
    };
    let spec = spec.for_command("run_tests");
    let config = spec.oci_config(&invocation, identity, &input)?;
    Ok(serde_json::to_value(config).unwrap())
}

#[test]
fn golden_an_egress_bundle_holds_every_default() {
    let value = config(&spec(None), &identity(true)).unwrap();
    let text = format!("{}\n", serde_json::to_string_pretty(&value).unwrap());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/oci-runc-egress.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    assert_eq!(text, want, "config.json differs from {}", path.display());
}

#[test]
fn the_bundle_is_hardened_as_the_engines_are() {
    let value = config(&spec(None), &identity(true)).unwrap();
    let process = &value["process"];
    assert_eq!(process["user"]["uid"], 65534);
    assert_eq!(process["user"]["gid"], 65534);
    for set in [
        "bounding",
        "effective",
        "inheritable",
        "permitted",
        "ambient",
    ] {
        assert_eq!(process["capabilities"][set], json!([]), "{set}");
    }
    assert_eq!(process["noNewPrivileges"], true);
    assert_eq!(process["oomScoreAdj"], 1000);
    assert_eq!(value["root"]["readonly"], true);
    let args: Vec<&str> = process["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            RELAY_TARGET,
            "--receipt",
            "65534:65534",
            "--seccomp",
            "3128",
            PROXY_SOCKET_TARGET,
            "--",
            "python3",
            "-m",
            "pytest",
            "-q"
        ]
    );
    let env: Vec<&str> = process["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"PATH=/opt/tools/bin:/usr/bin:/bin"),
        "the config's PATH wins: {env:?}"
    );
    assert!(
        env.contains(&"LANG=C.UTF-8") && env.contains(&"CI=1"),
        "{env:?}"
    );
    assert!(
        env.contains(&"HTTPS_PROXY=http://127.0.0.1:3128"),
        "{env:?}"
    );
    assert!(
        env.contains(&"GH_API_URL=http://127.0.0.1:3128/gh"),
        "{env:?}"
    );
    assert_eq!(env.iter().filter(|e| e.starts_with("PATH=")).count(), 1);
    let namespaces: Vec<&str> = value["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["type"].as_str().unwrap())
        .collect();
    for ns in ["pid", "network", "ipc", "uts", "mount", "cgroup"] {
        assert!(namespaces.contains(&ns), "{ns} in {namespaces:?}");
    }
    assert!(!namespaces.contains(&"user"));
    let resources = &value["linux"]["resources"];
    assert_eq!(resources["memory"]["limit"], 512 << 20);
    assert_eq!(
        resources["memory"]["swap"],
        512 << 20,
        "swap equal to memory: none"
    );
    assert_eq!(resources["pids"]["limit"], 128);
    assert_eq!(resources["cpu"]["quota"], 100_000);
    assert_eq!(
        resources["devices"][0],
        json!({"allow": false, "access": "rwm"})
    );
    assert!(
        value["linux"]["maskedPaths"]
            .as_array()
            .unwrap()
            .contains(&json!("/proc/kcore"))
    );
    assert!(
        value["linux"]["readonlyPaths"]
            .as_array()
            .unwrap()
            .contains(&json!("/proc/sys"))
    );
    let mounts = value["mounts"].as_array().unwrap();
    let mount = |target: &str| mounts.iter().find(|m| m["destination"] == target).cloned();
    let options = |target: &str| {
        mount(target).unwrap()["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert!(options("/workspace").contains(&"ro".to_owned()));
    assert!(options(RELAY_TARGET).contains(&"ro".to_owned()));
    assert!(options(PROXY_SOCKET_TARGET).contains(&"ro".to_owned()));
    let tmp = options("/tmp");
    for flag in ["noexec", "nosuid", "nodev", "size=67108864", "mode=1777"] {
        assert!(tmp.contains(&flag.to_owned()), "/tmp {flag}: {tmp:?}");
    }
    assert!(options("/sys").contains(&"ro".to_owned()));
    assert!(mount("/dev/shm").is_none(), "no /dev/shm, as --ipc none");
    assert_eq!(process["cwd"], "/workspace");
}

#[test]
fn gvisor_gets_four_times_the_pids_and_a_run_without_the_relay_is_refused() {
    let runsc = config(&spec(Some("runsc")), &identity(false)).unwrap();
    assert_eq!(runsc["linux"]["resources"]["pids"]["limit"], 512);
    let args = runsc["process"]["args"].as_array().unwrap();
    assert_eq!(
        args[..5],
        [
            json!(RELAY_TARGET),
            json!("--receipt"),
            json!("65534:65534"),
            json!("--seccomp"),
            json!("--")
        ]
    );
    let env = runsc["process"]["env"].to_string();
    assert!(
        !env.contains("PROXY"),
        "no proxy variable without a relay: {env}"
    );
    let bare = RunIdentity {
        receipt: None,
        ..identity(false)
    };
    let error = config(&spec(None), &bare).unwrap_err().to_string();
    assert!(
        error.contains("runs the relay as each sandbox's init"),
        "{error}"
    );
}

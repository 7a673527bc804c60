//! `engine = "oci"` from the command line, without a runtime: `--dry-run` prints the runtime's
//! command line and the bundle's whole `config.json` (every hardening default in it), and
//! creates nothing; a runtime given as a path is refused for Docker.

use std::process::Command;

use crate::{agentguard, stderr, stdout};

#[test]
fn dry_run_shows_the_runtime_command_and_the_hardened_config_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let id = "ab".repeat(32);
    let path = dir.path().join("agentguard.toml");
    std::fs::write(
        &path,
        format!(
            "image = \"sha256:{id}\"\nengine = \"oci\"\nruntime = \"runsc\"\n\n[environment]\nCI = \"1\"\n\n[commands]\nt = [\"python3\", \"-m\", \"pytest\"]\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["run", "--config", path.to_str().unwrap(), "t", "--dry-run"])
        .env("AGENTGUARD_OCI_CACHE", &cache)
        .env("AGENTGUARD_RUN_DIR", dir.path().join("runs"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let (command, config) = text.split_once('\n').unwrap();
    assert!(
        command.starts_with(
            "runsc --root /run/agentguard/oci/runsc/state --network=none --host-uds=open --oci-seccomp run --bundle /run/agentguard/oci/runsc/bundles/agentguard-"
        ),
        "{command}"
    );
    let config: serde_json::Value = serde_json::from_str(config).unwrap();
    assert_eq!(
        config["root"]["path"],
        cache
            .join(format!("images/{id}/rootfs"))
            .to_string_lossy()
            .as_ref()
    );
    assert_eq!(config["root"]["readonly"], true);
    let process = &config["process"];
    assert_eq!(process["noNewPrivileges"], true);
    assert_eq!(process["capabilities"]["bounding"], serde_json::json!([]));
    assert_eq!(process["user"]["uid"], 65534);
    let args = process["args"].to_string();
    assert!(
        args.contains(r#""--receipt","65534:65534","--seccomp","--","python3","-m","pytest""#),
        "{args}"
    );
    assert!(process["env"].to_string().contains("CI=1"));
    let seccomp = &config["linux"]["seccomp"];
    assert_eq!(seccomp["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(seccomp["architectures"].as_array().unwrap().len(), 1);
    assert_eq!(
        config["linux"]["resources"]["pids"]["limit"], 512,
        "runsc: four times pids"
    );
    assert!(!cache.exists(), "a dry run unpacks nothing");
    assert!(
        !dir.path().join("runs").exists(),
        "a dry run makes no run folder"
    );
}

#[test]
fn a_runtime_path_is_for_engine_oci_and_podman_not_docker() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentguard.toml");
    for (engine, ok) in [("docker", false), ("oci", true)] {
        std::fs::write(
            &path,
            format!(
                "image = \"localhost/x:1\"\nengine = \"{engine}\"\nruntime = \"/usr/local/bin/runc\"\n\n[commands]\nt = [\"true\"]\n"
            ),
        )
        .unwrap();
        let out = agentguard(&["run", "--config", path.to_str().unwrap(), "t", "--dry-run"]);
        if ok {
            assert!(out.status.success(), "{}", stderr(&out));
            assert!(
                stdout(&out)
                    .starts_with("/usr/local/bin/runc --root /run/agentguard/oci/runc/state run")
            );
        } else {
            assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
            assert!(
                stderr(&out).contains("Docker takes a registered runtime name, not a path"),
                "{}",
                stderr(&out)
            );
        }
    }
}

#[test]
fn an_image_layout_is_for_engine_oci_and_named_by_an_absolute_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agentguard.toml");
    for (engine, image, refusal) in [
        (
            "docker",
            "oci:/srv/images:v1",
            Some("runs only with engine = \"oci\""),
        ),
        (
            "podman",
            "oci:/srv/images",
            Some("runs only with engine = \"oci\""),
        ),
        ("oci", "oci:images:v1", Some("named by an absolute path")),
        ("oci", "oci:/srv/images:v1", None),
    ] {
        std::fs::write(
            &path,
            format!("image = \"{image}\"\nengine = \"{engine}\"\n\n[commands]\nt = [\"true\"]\n"),
        )
        .unwrap();
        let out = agentguard(&["run", "--config", path.to_str().unwrap(), "t", "--dry-run"]);
        match refusal {
            Some(why) => {
                assert_eq!(
                    out.status.code(),
                    Some(2),
                    "{engine} {image}: {}",
                    stderr(&out)
                );
                assert!(
                    stderr(&out).contains(why),
                    "{engine} {image}: {}",
                    stderr(&out)
                );
            }
            // The dry run names the image as given; nothing is read or unpacked.
            None => assert!(out.status.success(), "{}", stderr(&out)),
        }
    }
}

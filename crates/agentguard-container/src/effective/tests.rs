//! Per-command values: each overrides the spec's for that command only, with the same bounds
//! and errors naming `commands.NAME.KEY`; writable and hidden paths merged, mounted, checked.

use std::time::Duration;

use super::*;
use crate::Cpus;
use crate::argv::{Masks, RunIdentity};
use crate::engine::Engine;
use crate::masks::Mask;

/// A real workspace (the writable checks walk it) with `build/`, `.pytest_cache/`, `src/`.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for folder in ["build", ".pytest_cache", "src", "a/b"] {
        std::fs::create_dir_all(dir.path().join(folder)).unwrap();
    }
    // Owned by an ordinary user, as a writable workspace must be when agentguard is root
    // (not root, this process's own ids are used and the chown is not needed).
    let _ = std::os::unix::fs::chown(dir.path(), Some(1000), Some(1000));
    dir
}

fn builder(ws: &std::path::Path) -> crate::ContainerSpecBuilder {
    ContainerSpec::builder("localhost/tools:latest")
        .engine(Engine::parse("docker").unwrap())
        .workspace(ws.canonicalize().unwrap())
        .command("tests", ["python3", "-m", "pytest"])
        .command("install", ["pip", "install", "."])
        .user("1000:1000")
}

fn identity() -> RunIdentity {
    RunIdentity {
        name: "agentguard-test-1".into(),
        labels: Vec::new(),
        relay: None,
        masks: None,
        image_id: None,
        client: None,
        receipt: None,
    }
}

fn argv(spec: &ContainerSpec, name: &str, identity: &RunIdentity) -> String {
    let invocation = spec.invoke(name, &[]).unwrap();
    spec.run_command(&invocation, identity).display()
}

#[test]
fn a_command_overrides_only_its_own_values() {
    let ws = workspace();
    let install = CommandSettings {
        timeout: Some(Duration::from_secs(900)),
        max_output_bytes: Some(1 << 20),
        memory: Some(CommandSettings::parse_memory("1g").unwrap()),
        cpus: Some(Cpus::parse("0.5").unwrap()),
        pids: Some(256),
        tmpfs_size: Some(CommandSettings::parse_tmpfs_size("128m").unwrap()),
        environment: [("PIP_NO_INPUT".to_owned(), "1".to_owned())].into(),
        writable: vec!["build".into()],
        ..CommandSettings::default()
    };
    let spec = builder(ws.path())
        .env("CI", "1")
        .command_settings("install", install)
        .build()
        .unwrap();
    let own = spec.for_command("install");
    assert_eq!(own.timeout(), Duration::from_secs(900));
    assert_eq!(own.max_output_bytes(), 1 << 20);
    assert_eq!(
        spec.for_command("tests").timeout(),
        Duration::from_secs(300)
    );
    assert_eq!(spec.longest_timeout(), Duration::from_secs(900));
    let install = argv(&spec, "install", &identity());
    let tests = argv(&spec, "tests", &identity());
    assert!(
        install.contains("--memory 1g --memory-swap 1g"),
        "{install}"
    );
    assert!(install.contains("--cpus 0.5 --pids-limit 256"), "{install}");
    assert!(install.contains("size=128m,"), "{install}");
    assert!(
        install.contains("--env CI=1") && install.contains("--env PIP_NO_INPUT=1"),
        "{install}"
    );
    let root = ws.path().canonicalize().unwrap();
    let build = format!(
        "--mount type=bind,source={}/build,target=/workspace/build ",
        root.display()
    );
    assert!(
        install.contains(&build),
        "a writable folder, read-write: {install}"
    );
    assert!(
        !tests.contains("--memory 1g")
            && !tests.contains("size=128m")
            && !tests.contains("PIP_NO_INPUT"),
        "{tests}"
    );
    assert!(!tests.contains("/workspace/build"), "{tests}");
    assert!(tests.contains(",target=/workspace,readonly"), "{tests}");
}

#[test]
fn hidden_paths_are_mounted_read_only_over_everything() {
    let ws = workspace();
    let spec = builder(ws.path())
        .writable(vec!["build".into()])
        .hidden(vec![".env".into()])
        .build()
        .unwrap();
    let identity = RunIdentity {
        masks: Some(Masks {
            file: "/runs/agentguard-test-1/empty".into(),
            dir: "/runs/agentguard-test-1/empty.d".into(),
            paths: vec![
                Mask {
                    path: ".env".into(),
                    dir: false,
                },
                Mask {
                    path: "build/secrets".into(),
                    dir: true,
                },
            ],
        }),
        ..identity()
    };
    let argv = argv(&spec, "tests", &identity);
    let workspace = argv.find("target=/workspace,readonly").unwrap();
    let build = argv.find("target=/workspace/build ").unwrap();
    let file = argv
        .find("source=/runs/agentguard-test-1/empty,target=/workspace/.env,readonly")
        .unwrap();
    let dir = argv
        .find("source=/runs/agentguard-test-1/empty.d,target=/workspace/build/secrets,readonly")
        .unwrap();
    assert!(
        workspace < build && build < file && file < dir,
        "masks come last: {argv}"
    );
    // A spec that hides paths never runs without what to mask them with.
    assert_eq!(
        spec.prepare_run(&super::tests::identity()).unwrap_err(),
        crate::MaskError::NoSources
    );
}

#[test]
fn each_per_command_value_is_bounded_and_named() {
    let ws = workspace();
    let refused = |settings: CommandSettings| {
        builder(ws.path())
            .command_settings("install", settings)
            .build()
            .unwrap_err()
            .to_string()
    };
    let zero = refused(CommandSettings {
        timeout: Some(Duration::ZERO),
        ..CommandSettings::default()
    });
    assert!(zero.contains("`commands.install.timeout`"), "{zero}");
    let long = refused(CommandSettings {
        timeout: Some(Duration::from_secs(8 * 24 * 3600)),
        ..CommandSettings::default()
    });
    assert!(
        long.contains("`commands.install.timeout`") && long.contains("7 days"),
        "{long}"
    );
    let env = refused(CommandSettings {
        environment: [("BAD KEY".to_owned(), "x".to_owned())].into(),
        ..CommandSettings::default()
    });
    assert!(env.contains("commands.install."), "{env}");
    let both = refused(CommandSettings {
        workspace_mode: Some(WorkspaceMode::ReadWrite),
        writable: vec!["build".into()],
        ..CommandSettings::default()
    });
    assert!(
        both.contains("`commands.install.writable`") && both.contains("rw"),
        "{both}"
    );
    let link = ws.path().join("out");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let linked = refused(CommandSettings {
        writable: vec!["out".into()],
        ..CommandSettings::default()
    });
    assert!(
        linked.contains("`commands.install.writable`") && linked.contains("symlink"),
        "{linked}"
    );
    let pattern = refused(CommandSettings {
        hidden: vec!["a{b".into()],
        ..CommandSettings::default()
    });
    assert!(pattern.contains("`commands.install.hidden`"), "{pattern}");
    assert!(
        ContainerSpec::builder("i")
            .command("x", ["true"])
            .command_settings("y", CommandSettings::default())
            .build()
            .unwrap_err()
            .to_string()
            .contains("not on the allowlist")
    );
}

#[test]
fn writable_paths_are_never_nested_nor_beside_a_writable_workspace() {
    let ws = workspace();
    let nested = builder(ws.path())
        .writable(vec!["a".into()])
        .command_settings(
            "install",
            CommandSettings {
                writable: vec!["a/b".into()],
                ..CommandSettings::default()
            },
        )
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        nested.contains("inside the writable path \"a\""),
        "{nested}"
    );
    let beside = builder(ws.path())
        .command_settings(
            "install",
            CommandSettings {
                workspace_mode: Some(WorkspaceMode::ReadWrite),
                ..CommandSettings::default()
            },
        )
        .command_settings(
            "tests",
            CommandSettings {
                writable: vec![".pytest_cache".into()],
                ..CommandSettings::default()
            },
        )
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        beside.contains("install has workspace_mode = \"rw\""),
        "{beside}"
    );
    // A writing command runs as the workspace's owner; the others as the spec's user.
    let spec = builder(ws.path())
        .command_settings(
            "install",
            CommandSettings {
                workspace_mode: Some(WorkspaceMode::ReadWrite),
                ..CommandSettings::default()
            },
        )
        .build()
        .unwrap();
    assert_eq!(spec.for_command("tests").user().to_string(), "1000:1000");
    assert!(spec.for_command("install").writes_workspace());
    assert!(!spec.for_command("tests").writes_workspace());
    let install = argv(&spec, "install", &identity());
    assert!(
        install.contains(",target=/workspace --workdir"),
        "read-write: {install}"
    );
}

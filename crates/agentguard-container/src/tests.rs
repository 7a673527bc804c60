//! Golden tests of the engine argv, and validation of every spec field.
//!
//! The golden files under `tests/golden/` are the exact argv, one argument per line, for each
//! engine x runtime x workspace mode. Regenerate them with `UPDATE_GOLDEN=1 cargo test`, then
//! review the diff: every changed line is a changed security property.

use std::path::Path;

use crate::*;

fn identity() -> RunIdentity {
    RunIdentity {
        name: "agentguard-test-1".into(),
        labels: vec![("agentguard.owner".into(), "4242".into())],
        relay: None,
        masks: None,
        image_id: None,
        client: None,
        receipt: None,
    }
}

fn spec(engine: &str, runtime: Option<&str>, mode: WorkspaceMode) -> ContainerSpec {
    let mut builder = ContainerSpec::builder("localhost/tools:latest")
        .engine(Engine::parse(engine).unwrap())
        .command("run_tests", ["python3", "-m", "pytest", "-q"])
        .workspace("/srv/workspace")
        .workspace_mode(mode)
        .env("CI", "1");
    if let Some(runtime) = runtime {
        builder = builder.runtime(runtime);
    }
    builder.build().unwrap()
}

fn check_golden(file: &str, spec: &ContainerSpec) {
    check_golden_with(file, spec, &identity());
}

/// An identity whose way out is a relay to the egress proxy.
fn egress_identity() -> RunIdentity {
    RunIdentity {
        relay: Some(Relay {
            program: "/run/user/0/agentguard/agentguard-test-1/relay".into(),
            socket: "/run/user/0/agentguard/agentguard-test-1/proxy.sock".into(),
            port: 3128,
            routes: Vec::new(),
        }),
        ..identity()
    }
}

/// The engine command of a run of `name` without params, as every front end makes it.
fn engine_run(
    spec: &ContainerSpec,
    name: &str,
    identity: &RunIdentity,
) -> Result<EngineCommand, agentguard_policy::Denial> {
    spec.invoke(name, &[])
        .map(|invocation| spec.run_command(&invocation, identity))
}

fn check_golden_with(file: &str, spec: &ContainerSpec, identity: &RunIdentity) {
    let invocation = engine_run(spec, "run_tests", identity).unwrap();
    let mut text = format!("{}\n", invocation.program.display());
    for arg in &invocation.args {
        text.push_str(&arg.to_string_lossy());
        text.push('\n');
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    assert_eq!(text, want, "argv differs from {file}");
}

#[test]
fn golden_egress_runs_keep_network_none_and_mount_the_relay() {
    for (engine, runtime, file) in [
        ("docker", None, "docker-default-egress.txt"),
        ("docker", Some("runsc"), "docker-runsc-egress.txt"),
        ("podman", None, "podman-runc-egress.txt"),
        ("podman", Some("runsc"), "podman-runsc-egress.txt"),
    ] {
        let spec = spec(engine, runtime, WorkspaceMode::ReadWrite);
        check_golden_with(file, &spec, &egress_identity());
        let egress = args_with(&spec, &egress_identity());
        let joined = egress.join(" ");
        assert!(joined.contains("--network none"), "{file}: {joined}");
        let relay_at = egress.iter().position(|a| a == RELAY_TARGET).unwrap();
        assert_eq!(egress[relay_at - 1], "--entrypoint", "{file}");
        assert_eq!(egress[relay_at + 2], "--receipt", "{file}");
        assert_eq!(egress[relay_at + 3], spec.user().to_string(), "{file}");
        assert_eq!(
            &egress[relay_at + 4..],
            [
                "3128",
                PROXY_SOCKET_TARGET,
                "--",
                "python3",
                "-m",
                "pytest",
                "-q"
            ],
            "{file}: the relay takes the receipt with the run's ids, then gets the port, the socket, and the whole argv"
        );
        assert!(
            joined.contains("HTTPS_PROXY=http://127.0.0.1:3128"),
            "{file}"
        );
        assert!(joined.contains("--env NO_PROXY= "), "{file}");
        let host_uds = joined.contains("host-uds=open");
        assert_eq!(
            host_uds,
            engine == "podman" && runtime.is_some(),
            "{file}: only podman passes runsc's host-uds flag itself"
        );
        // Without a relay nothing of it appears.
        let plain = args(&spec).join(" ");
        assert!(
            !plain.contains("relay") && !plain.contains("PROXY") && !plain.contains("host-uds")
        );
    }
}

#[test]
fn a_run_with_routes_gets_their_urls_and_keeps_loopback_off_the_proxy() {
    let spec = ContainerSpec::builder(
        "img@sha256:0000000000000000000000000000000000000000000000000000000000000000",
    )
    .engine(Engine::parse("docker").unwrap())
    .command("run_tests", ["true"])
    .build()
    .unwrap();
    let mut identity = egress_identity();
    if let Some(relay) = &mut identity.relay {
        relay.routes = vec![
            RouteVariable {
                variable: Some("GH_API_URL".into()),
                route: "gh".into(),
            },
            RouteVariable {
                variable: None,
                route: "index".into(),
            },
        ];
    }
    let joined = args_with(&spec, &identity).join(" ");
    assert!(
        joined.contains("--env GH_API_URL=http://127.0.0.1:3128/gh "),
        "{joined}"
    );
    assert!(
        joined.contains("--env NO_PROXY=127.0.0.1,localhost "),
        "{joined}"
    );
    assert!(
        joined.contains("--env no_proxy=127.0.0.1,localhost "),
        "{joined}"
    );
    assert!(
        joined.contains("HTTPS_PROXY=http://127.0.0.1:3128 "),
        "{joined}"
    );
    assert!(!joined.contains("/index"), "no variable, no URL: {joined}");
    // Issue 34, item 8: a route without `env` still keeps loopback off the proxy.
    if let Some(relay) = &mut identity.relay {
        relay.routes.remove(0);
    }
    let joined = args_with(&spec, &identity).join(" ");
    assert!(
        joined.contains("--env NO_PROXY=127.0.0.1,localhost "),
        "{joined}"
    );
}

#[test]
fn golden_docker_default_ro() {
    check_golden(
        "docker-default-ro.txt",
        &spec("docker", None, WorkspaceMode::ReadOnly),
    );
}

#[test]
fn golden_docker_runsc_rw() {
    check_golden(
        "docker-runsc-rw.txt",
        &spec("docker", Some("runsc"), WorkspaceMode::ReadWrite),
    );
}

#[test]
fn golden_podman_runc_ro() {
    check_golden(
        "podman-runc-ro.txt",
        &spec("podman", Some("runc"), WorkspaceMode::ReadOnly),
    );
}

#[test]
fn golden_podman_runsc_rw() {
    check_golden(
        "podman-runsc-rw.txt",
        &spec("/usr/bin/podman", Some("runsc"), WorkspaceMode::ReadWrite),
    );
}

#[test]
fn golden_docker_default_rw() {
    check_golden(
        "docker-default-rw.txt",
        &spec("docker", None, WorkspaceMode::ReadWrite),
    );
}

#[test]
fn golden_docker_runsc_ro() {
    check_golden(
        "docker-runsc-ro.txt",
        &spec("docker", Some("runsc"), WorkspaceMode::ReadOnly),
    );
}

#[test]
fn golden_podman_runc_rw() {
    check_golden(
        "podman-runc-rw.txt",
        &spec("podman", Some("runc"), WorkspaceMode::ReadWrite),
    );
}

#[test]
fn golden_podman_runsc_ro() {
    check_golden(
        "podman-runsc-ro.txt",
        &spec("/usr/bin/podman", Some("runsc"), WorkspaceMode::ReadOnly),
    );
}

fn args(spec: &ContainerSpec) -> Vec<String> {
    args_with(spec, &identity())
}

fn args_with(spec: &ContainerSpec, identity: &RunIdentity) -> Vec<String> {
    engine_run(spec, "run_tests", identity)
        .unwrap()
        .args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn podman_global_flags_come_before_run() {
    let a = args(&spec("podman", Some("runsc"), WorkspaceMode::ReadOnly));
    let run = a.iter().position(|x| x == "run").unwrap();
    assert_eq!(
        &a[..run],
        ["--runtime", "runsc", "--runtime-flag", "network=none"]
    );
    let d = args(&spec("docker", Some("runsc"), WorkspaceMode::ReadOnly));
    assert_eq!(d[0], "run", "docker takes --runtime after run");
}

#[test]
fn the_allowlisted_argv_is_the_tail_and_the_entrypoint_is_argv0() {
    let a = args(&spec("docker", None, WorkspaceMode::ReadOnly));
    assert_eq!(
        &a[a.len() - 6..],
        [
            "--entrypoint",
            "python3",
            "localhost/tools:latest",
            "-m",
            "pytest",
            "-q"
        ]
    );
}

#[test]
fn only_an_exact_name_selects_an_argv() {
    let s = spec("docker", None, WorkspaceMode::ReadOnly);
    for name in [
        "run_tests ",
        "RUN_TESTS",
        "run",
        "--privileged",
        "run_tests --privileged",
        "sh -c id",
        "",
    ] {
        let denial = engine_run(&s, name, &identity()).unwrap_err();
        assert_eq!(denial.reason.code(), "command_not_allowed", "{name:?}");
    }
}

#[test]
fn display_quotes_unsafe_words() {
    let inv = EngineCommand {
        program: "docker".into(),
        args: vec!["run".into(), "a b".into(), "it's".into()],
    };
    assert_eq!(inv.display(), r"docker run 'a b' 'it'\''s'");
}

#[test]
fn invalid_values_name_field_and_value() {
    let base = || ContainerSpec::builder("localhost/tools:latest").command("t", ["true"]);
    let cases: Vec<(ContainerSpecBuilder, &str)> = vec![
        (ContainerSpec::builder(""), "`image` value \"\""),
        (
            ContainerSpec::builder("--privileged"),
            "`image` value \"--privileged\"",
        ),
        (
            ContainerSpec::builder("img name"),
            "`image` value \"img name\"",
        ),
        (
            base().user("0:0"),
            "`user` value \"0:0\": the container never runs as root",
        ),
        (base().user("1000:0"), "`user` value \"1000:0\""),
        (
            base().user("nobody"),
            "`user` value \"nobody\": expected numeric",
        ),
        (base().memory("lots"), "`memory` value \"lots\""),
        (base().memory("1k"), "`memory` value \"1k\": at least"),
        (base().tmpfs_size("64q"), "`tmpfs_size` value \"64q\""),
        (base().cpus("0"), "`cpus` value \"0\""),
        (base().cpus("-1"), "`cpus` value \"-1\""),
        (base().cpus("inf"), "`cpus` value \"inf\""),
        (base().pids(0), "`pids` value \"0\""),
        (
            base().env("HTTPS_PROXY", "http://10.0.0.1:3128"),
            "`environment` value \"HTTPS_PROXY\": the proxy variables are agentguard's",
        ),
        (
            base().env("no_proxy", ""),
            "`environment` value \"no_proxy\"",
        ),
        (
            base().runtime("--privileged"),
            "`runtime` value \"--privileged\"",
        ),
        (
            base().workspace("relative/dir"),
            "`workspace` value \"relative/dir\": the workspace must be an absolute path",
        ),
        (
            base().workspace("/a,readonly=false"),
            "`workspace` value \"/a,readonly=false\"",
        ),
        (base().env("1BAD", "x"), "`environment` value \"1BAD\""),
        (
            base().env("GOOD", "secret\0value"),
            "`environment` value \"GOOD\"",
        ),
        (
            ContainerSpec::builder("img").command("bad name", ["true"]),
            "invalid command \"bad name\"",
        ),
    ];
    for (builder, needle) in cases {
        let err = builder.build().unwrap_err().to_string();
        assert!(err.contains(needle), "want {needle:?} in {err:?}");
        assert!(
            !err.contains("secret"),
            "an environment value leaked into {err:?}"
        );
    }
    assert!(Engine::parse("nerdctl").is_err());
    assert_eq!(
        Engine::parse("/opt/bin/podman").unwrap().kind,
        EngineKind::Podman
    );
    assert_eq!(
        WorkspaceMode::parse("rw").unwrap(),
        WorkspaceMode::ReadWrite
    );
    assert!(WorkspaceMode::parse("RW").is_err());
}

#[test]
fn engine_failures_are_classified_never_reported_as_a_tool_failure() {
    let executor = ContainerExecutor::new(spec("docker", Some("runsc"), WorkspaceMode::ReadOnly));
    for (stderr, reason) in [
        (
            "docker: Error response from daemon: No such image: localhost/tools:latest.",
            "missing_image",
        ),
        (
            "Error: localhost/tools:latest: image not known",
            "missing_image",
        ),
        (
            "docker: Error response from daemon: Unknown runtime specified runsc",
            "unknown_runtime",
        ),
        ("Error: could not find runtime \"runsc\"", "unknown_runtime"),
        (
            "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
            "engine_not_running",
        ),
        (
            "Error: unable to connect to Podman socket",
            "engine_not_running",
        ),
        (
            "docker: Error response from daemon: something unexpected",
            "engine_error",
        ),
    ] {
        assert_eq!(
            crate::classify::classify(executor.spec(), stderr).reason(),
            reason,
            "{stderr}"
        );
    }
    let message = crate::classify::classify(executor.spec(), "No such image: x").to_string();
    assert!(
        message.contains("pull is `never`") && message.contains("docker import"),
        "says what to do: {message}"
    );
}

#[test]
fn the_model_can_never_supply_a_flag_or_an_argv() {
    let s = spec("docker", None, WorkspaceMode::ReadOnly);
    let allowed = args(&s);
    let hostile = [
        "--privileged",
        "-v /:/host",
        "run_tests --privileged",
        "run_tests;id",
        "run_tests\0",
        "$(id)",
        "../run_tests",
        "run_tests\n--network=host",
        "--entrypoint=sh",
        "RUN_TESTS",
        " run_tests",
        "",
    ];
    for name in hostile {
        assert!(
            engine_run(&s, name, &identity()).is_err(),
            "{name:?} produced an argv"
        );
    }
    // The allowed name selects exactly the configured argv, and the name itself never appears.
    assert!(
        !allowed.iter().any(|a| a == "run_tests"),
        "the NAME is not part of the command line"
    );
    let image = allowed
        .iter()
        .position(|a| a == "localhost/tools:latest")
        .unwrap();
    assert_eq!(
        &allowed[image - 2..],
        [
            "--entrypoint",
            "python3",
            "localhost/tools:latest",
            "-m",
            "pytest",
            "-q"
        ]
    );
}

#[test]
fn stdout_and_stderr_share_one_cap() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert!(!crate::capture::keep(&mut out, 0, b"12345", 8, None));
    assert!(
        crate::capture::keep(&mut err, out.len(), b"abcdef", 8, None),
        "only 3 of 6 bytes fit"
    );
    assert_eq!(
        (out.as_slice(), err.as_slice()),
        (&b"12345"[..], &b"abc"[..])
    );
    assert!(crate::capture::keep(&mut out, err.len(), b"x", 8, None));
    assert_eq!(out.len() + err.len(), 8);
}

#[test]
fn runsc_gets_four_times_the_pids_and_pins_are_recognized() {
    assert_eq!(
        spec("docker", Some("runsc"), WorkspaceMode::ReadOnly).host_pids_limit(),
        512
    );
    assert_eq!(
        spec("docker", None, WorkspaceMode::ReadOnly).host_pids_limit(),
        128
    );
    let digest = format!("localhost/tools@sha256:{}", "a".repeat(64));
    let pinned = ContainerSpec::builder(&digest)
        .command("t", ["true"])
        .require_digest(true)
        .build()
        .unwrap();
    assert_eq!(pinned.image_pin(), ImagePin::Digest("a".repeat(64)));
    let id = format!("sha256:{}", "b".repeat(64));
    assert_eq!(
        ContainerSpec::builder(&id)
            .command("t", ["true"])
            .build()
            .unwrap()
            .image_pin(),
        ImagePin::Id("b".repeat(64))
    );
    let bare = ContainerSpec::builder("localhost/tools:latest")
        .command("t", ["true"])
        .require_digest(true)
        .build();
    assert!(bare.unwrap_err().to_string().contains("require_digest"));
    let short = ContainerSpec::builder("sha256:abc")
        .command("t", ["true"])
        .build();
    assert!(short.unwrap_err().to_string().contains("64 lower-case hex"));
    assert!(
        ContainerSpec::builder("x")
            .command("t", ["true"])
            .pull("always")
            .build()
            .is_err()
    );
}

/// Issue 37: a run without a network starts with the relay too, for the isolation receipt
/// alone: its program mounted read-only, then `--receipt UID:GID -- ARGV`; nothing of a proxy.
#[test]
fn golden_none_runs_take_the_receipt_through_the_relay() {
    let spec = spec("docker", None, WorkspaceMode::ReadOnly);
    let identity = RunIdentity {
        receipt: Some("/run/user/0/agentguard/agentguard-test-1/relay".into()),
        ..identity()
    };
    check_golden_with("docker-default-receipt.txt", &spec, &identity);
    let argv = args_with(&spec, &identity);
    let joined = argv.join(" ");
    assert!(joined.contains("--network none"), "{joined}");
    assert!(
        joined.contains("--mount type=bind,source=/run/user/0/agentguard/agentguard-test-1/relay,target=/run/agentguard/relay,readonly"),
        "{joined}"
    );
    let relay_at = argv.iter().position(|a| a == RELAY_TARGET).unwrap();
    assert_eq!(argv[relay_at - 1], "--entrypoint");
    assert_eq!(
        &argv[relay_at + 2..],
        [
            "--receipt",
            "65534:65534",
            "--",
            "python3",
            "-m",
            "pytest",
            "-q"
        ]
    );
    assert!(
        !joined.contains("PROXY") && !joined.contains("proxy.sock"),
        "{joined}"
    );
}

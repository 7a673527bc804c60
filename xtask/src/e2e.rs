//! `cargo xtask e2e`: the hardened argv on real Docker, Podman and gVisor.
//!
//! For every engine/runtime combination found, it runs the probe script inside a container
//! launched with exactly the argv that `agentguard-container` generates, and checks each
//! isolation property from inside. A missing combination is SKIPPED loudly; one named by
//! `--require` fails the run, so CI can never pass by skipping.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentguard_container::{ContainerSpec, Engine, EngineKind, RunIdentity};
use anyhow::{Context, Result, bail};

use crate::{cmd, image, setup};

/// The probe, run with `sh -c` inside the container.
pub(crate) const PROBE: &str = include_str!("../../tests/e2e/probe.sh");

/// One engine and runtime to test.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Combo {
    pub(crate) engine: EngineKind,
    /// `None` for Docker's default runtime (runc); Podman always names one, since its default
    /// (crun) does not work on cgroup v1 hybrid hosts like ours (ENGINES.md).
    pub(crate) runtime: Option<&'static str>,
}

impl Combo {
    pub(crate) fn label(&self) -> String {
        format!("{}+{}", self.engine, self.runtime.unwrap_or("runc"))
    }

    pub(crate) fn gvisor(&self) -> bool {
        self.runtime == Some("runsc")
    }
}

const COMBOS: [Combo; 4] = [
    Combo {
        engine: EngineKind::Docker,
        runtime: None,
    },
    Combo {
        engine: EngineKind::Docker,
        runtime: Some("runsc"),
    },
    Combo {
        engine: EngineKind::Podman,
        runtime: Some("runc"),
    },
    Combo {
        engine: EngineKind::Podman,
        runtime: Some("runsc"),
    },
];

fn available(combo: &Combo, engines: &setup::Engines) -> bool {
    match (combo.engine, combo.gvisor()) {
        (EngineKind::Docker, false) => engines.docker,
        (EngineKind::Docker, true) => engines.docker_runsc,
        (EngineKind::Podman, false) => engines.podman,
        (EngineKind::Podman, true) => engines.podman_runsc,
    }
}

fn required(combo: &Combo, require: &[String]) -> bool {
    let has = |word: &str| require.iter().any(|r| r == word);
    has(combo.engine.program_name()) || (combo.gvisor() && has("runsc"))
}

fn parse_require(args: &[String]) -> Result<Vec<String>> {
    let mut require = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let list = match arg.strip_prefix("--require=") {
            Some(list) => list.to_owned(),
            None if arg == "--require" => iter
                .next()
                .context("--require needs a list such as docker,podman,runsc")?
                .clone(),
            None => bail!("unknown e2e argument {arg:?}; expected --require docker,podman,runsc"),
        };
        for word in list.split(',').filter(|w| !w.is_empty()) {
            if !["docker", "podman", "runsc"].contains(&word) {
                bail!(
                    "--require: unknown engine or runtime {word:?}; expected docker, podman or runsc"
                );
            }
            require.push(word.to_owned());
        }
    }
    Ok(require)
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let require = parse_require(args)?;
    println!("== e2e: hardened containers on real engines");
    let engines = setup::detect();
    let mut failures = Vec::new();
    let (mut ran, mut passed, mut skipped) = (0, 0, 0);
    for combo in COMBOS {
        let label = combo.label();
        if !available(&combo, &engines) {
            let loud = format!(
                "!!!!! SKIPPED {label}: not available on this machine (run `cargo xtask setup`) !!!!!"
            );
            eprintln!("{loud}");
            skipped += 1;
            if required(&combo, &require) {
                failures.push(format!("{label} is required (--require) but not available"));
            }
            continue;
        }
        ran += 1;
        match probe(combo) {
            Ok(checks) => {
                passed += 1;
                println!("ok   {label}: {checks} isolation checks passed");
            }
            Err(err) => {
                println!("FAIL {label}: {err:#}");
                failures.push(format!("{label}: {err:#}"));
            }
        }
    }
    println!(
        "e2e: {passed} passed, {} failed, {skipped} skipped",
        ran - passed
    );
    if require.iter().any(|r| r == "runsc") && !(engines.docker_runsc || engines.podman_runsc) {
        failures.push("runsc is required but no engine can run it".into());
    }
    if !failures.is_empty() {
        bail!("e2e failed:\n  {}", failures.join("\n  "));
    }
    if ran == 0 {
        bail!("e2e ran nothing: no container engine is available (run `cargo xtask setup`)");
    }
    Ok(())
}

/// A unique name per container so that parallel runs never collide.
fn unique_name(tag: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "agentguard-e2e-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A workspace owned by 65534 (so only the read-only mount can stop a write) with a marker.
struct Workspace(PathBuf);

impl Workspace {
    fn new(name: &str) -> Result<Workspace> {
        let path = cmd::root().join("target/xtask").join(name);
        fs::create_dir_all(&path)?;
        fs::write(path.join("marker"), "hello from the host\n")?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        std::os::unix::fs::chown(&path, Some(65534), Some(65534))
            .with_context(|| format!("chown 65534 {} (e2e runs as root)", path.display()))?;
        Ok(Workspace(path))
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Runs an engine invocation with a cleaned environment plus host canaries that must not
/// reach the container, and kills the container by name if it outlives `limit`.
pub(crate) fn run_invocation(
    engine: EngineKind,
    invocation: &agentguard_container::Invocation,
    name: &str,
    limit: Duration,
) -> Result<(i32, String, String)> {
    let mut command = Command::new(&invocation.program);
    command
        .args(&invocation.args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(
            "HOME",
            std::env::var_os("HOME").unwrap_or_else(|| "/root".into()),
        )
        // Canaries: a host secret, and a proxy variable podman would copy by default.
        .env("AGENTGUARD_E2E_CANARY", "leaked-from-host")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command
        .spawn()
        .with_context(|| format!("starting {}", invocation.program.display()))?;
    let start = Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        if start.elapsed() > limit {
            let _ = cmd::output(engine.program_name(), &["rm", "-f", name]);
            bail!("the container did not finish within {limit:?}; removed it by name");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = waiter
        .join()
        .map_err(|_| anyhow::anyhow!("waiter thread panicked"))??;
    Ok((
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// Runs the probe for one combination and checks every property; returns the check count.
fn probe(combo: Combo) -> Result<usize> {
    let engine = combo.engine.program_name();
    image::ensure_probe_image(engine)?;
    let name = unique_name(&combo.label().replace('+', "-"));
    let workspace = Workspace::new(&name)?;
    let mut builder = ContainerSpec::builder(image::PROBE_IMAGE)
        .engine(Engine::of_kind(combo.engine))
        .command("probe", ["sh", "-c", PROBE])
        .workspace(&workspace.0)
        .env("AGENTGUARD_E2E_CONFIGURED", "yes");
    if let Some(runtime) = combo.runtime {
        builder = builder.runtime(runtime);
    }
    let spec = builder.build()?;
    let identity = RunIdentity {
        name: name.clone(),
        labels: vec![("agentguard.e2e".into(), std::process::id().to_string())],
    };
    let invocation = spec
        .invocation("probe", &identity)
        .map_err(|d| anyhow::anyhow!("{d}"))?;
    let (code, stdout, stderr) =
        run_invocation(combo.engine, &invocation, &name, Duration::from_secs(120))?;
    if code != 0 {
        bail!(
            "the probe exited {code}\nstdout:\n{stdout}\nstderr:\n{stderr}\nargv: {}",
            invocation.display()
        );
    }
    let seen: BTreeMap<&str, &str> = stdout
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    let checks = expectations(combo);
    let mut wrong = Vec::new();
    for (key, check, want) in &checks {
        let got = seen.get(key).copied().unwrap_or("<missing>").trim();
        if !check(got) {
            wrong.push(format!("{key}: got {got:?}, want {want}"));
        }
    }
    let leftover = cmd::output(
        engine,
        &["ps", "-a", "-q", "--filter", &format!("name=^{name}$")],
    )?;
    if !cmd::stdout_text(&leftover).is_empty() {
        wrong.push(format!("container {name} was left behind after --rm"));
    }
    if !wrong.is_empty() {
        bail!("{}\nargv: {}", wrong.join("\n"), invocation.display());
    }
    Ok(checks.len() + 1)
}

type Check = (&'static str, Box<dyn Fn(&str) -> bool>, &'static str);

fn expectations(combo: Combo) -> Vec<Check> {
    let eq = |want: &'static str| -> Box<dyn Fn(&str) -> bool> { Box::new(move |got| got == want) };
    let has = |want: &'static str| -> Box<dyn Fn(&str) -> bool> {
        Box::new(move |got| got.contains(want) && !got.contains("allowed"))
    };
    let mut checks: Vec<Check> = vec![
        ("uid", eq("65534"), "65534 (user nobody)"),
        ("gid", eq("65534"), "65534"),
        (
            "capeff",
            eq("0000000000000000"),
            "no effective capabilities",
        ),
        ("capbnd", eq("0000000000000000"), "empty bounding set"),
        (
            "root_write",
            has("Read-only file system"),
            "a write to 1777 /scratch refused by the read-only root",
        ),
        (
            "workspace_write",
            has("Read-only file system"),
            "a write to the 65534-owned workspace refused by the ro mount",
        ),
        (
            "workspace_read",
            eq("hello from the host"),
            "the workspace marker readable",
        ),
        ("tmp_write", eq("allowed"), "/tmp writable"),
        ("tmp_exec", has("Permission denied"), "/tmp noexec"),
        (
            "shm_write",
            Box::new(|got: &str| !got.contains("allowed")),
            "/dev/shm not writable (--ipc none)",
        ),
        ("interfaces", eq("lo"), "only the loopback interface"),
        ("env_canary", eq("absent"), "no host environment variable"),
        ("env_http_proxy", eq("absent"), "no host proxy variable"),
        (
            "env_configured",
            eq("yes"),
            "the configured environment present",
        ),
        (
            "pid1",
            Box::new(|got: &str| {
                got.contains("init") || got.contains("catatonit") || got.contains("tini")
            }),
            "an init process as pid 1 (--init)",
        ),
        ("done", eq("1"), "the probe ran to the end"),
    ];
    if combo.gvisor() {
        // gVisor does not show NoNewPrivs or the cgroup files inside; limits under runsc are
        // proved from outside by the containers issue's e2e probes.
        checks.push((
            "nonewprivs",
            Box::new(|got: &str| got.is_empty() || got == "1"),
            "absent under gVisor, or 1",
        ));
    } else {
        checks.push(("nonewprivs", eq("1"), "no-new-privileges set"));
        checks.push(("pids_max", eq("128"), "pids limit 128"));
        checks.push(("memory_limit", eq("536870912"), "memory limit 512 MiB"));
    }
    checks
}

//! `cargo xtask e2e`: the container executor on real Docker, Podman and gVisor.
//!
//! For every engine/runtime combination found, it runs containers through exactly the code
//! path users get (`ContainerExecutor`, and the `agentguard run` binary for the headline
//! pytest example) and checks each isolation property: from inside the container with the
//! probe script, and from outside (run status, host file ownership, leftover containers and
//! gVisor processes). A missing combination is SKIPPED loudly; one named by `--require` fails
//! the run, so CI can never pass by skipping.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use agentguard_container::{
    ContainerExecutor, ContainerSpec, ContainerSpecBuilder, Engine, EngineKind, RunResult,
    RunStatus, WorkspaceMode,
};
use anyhow::{Context, Result, bail};

use crate::{cmd, image, setup};

/// The probe, run with `sh -c` inside the container.
pub(crate) const PROBE: &str = include_str!("../../tests/e2e/probe.sh");

/// A variable set in the engine's environment that must never reach a container.
const CANARY: &str = "AGENTGUARD_E2E_CANARY";

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

    /// A spec builder for this engine and runtime with the probe image.
    fn builder(&self, image: &str) -> ContainerSpecBuilder {
        let builder = ContainerSpec::builder(image).engine(Engine::of_kind(self.engine));
        match self.runtime {
            Some(runtime) => builder.runtime(runtime),
            None => builder,
        }
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
    // The executor passes only a short list of variables to the engine; to prove that nothing
    // else leaks, e2e runs with a canary and a proxy variable in its own environment.
    if std::env::var_os(CANARY).is_none() {
        let status = Command::new(std::env::current_exe()?)
            .arg("e2e")
            .args(args)
            .env(CANARY, "leaked-from-host")
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .status()
            .context("re-running e2e with the canary variables")?;
        if !status.success() {
            bail!("e2e failed");
        }
        return Ok(());
    }
    let require = parse_require(args)?;
    println!("== e2e: hardened containers on real engines");
    cmd::run(
        "cargo",
        &["build", "--quiet", "--package", "agentguard-cli"],
    )?;
    let engines = setup::detect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut failures = Vec::new();
    let (mut passed, mut skipped) = (0, 0);
    for combo in COMBOS {
        let label = combo.label();
        if !available(&combo, &engines) {
            eprintln!(
                "!!!!! SKIPPED {label}: not available on this machine (run `cargo xtask setup`) !!!!!"
            );
            skipped += 1;
            if required(&combo, &require) {
                failures.push(format!("{label} is required (--require) but not available"));
            }
            continue;
        }
        match runtime.block_on(probe_all(combo)) {
            Ok(checks) => {
                passed += 1;
                println!("ok   {label}: {checks} checks passed");
            }
            Err(err) => {
                println!("FAIL {label}: {err:#}");
                failures.push(format!("{label}: {err:#}"));
            }
        }
    }
    println!(
        "e2e: {passed} passed, {} failed, {skipped} skipped",
        COMBOS.len() - passed - skipped
    );
    if require.iter().any(|r| r == "runsc") && !(engines.docker_runsc || engines.podman_runsc) {
        failures.push("runsc is required but no engine can run it".into());
    }
    if !failures.is_empty() {
        bail!("e2e failed:\n  {}", failures.join("\n  "));
    }
    if passed == 0 {
        bail!("e2e ran nothing: no container engine is available (run `cargo xtask setup`)");
    }
    Ok(())
}

/// A folder under target/ with a marker file, owned by `owner`, removed on drop.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str, owner: (u32, u32)) -> Result<Folder> {
        let path = cmd::root().join("target/xtask").join(name);
        if path.exists() {
            fs::remove_dir_all(&path)?;
        }
        fs::create_dir_all(&path)?;
        fs::write(path.join("marker"), "hello from the host\n")?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        std::os::unix::fs::chown(&path, Some(owner.0), Some(owner.1))
            .with_context(|| format!("chown {} (e2e runs as root)", path.display()))?;
        Ok(Folder(path))
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn unique(combo: &Combo, what: &str) -> String {
    format!(
        "e2e-{}-{}-{what}",
        std::process::id(),
        combo.label().replace('+', "-")
    )
}

/// Every check for one combination; returns how many passed.
async fn probe_all(combo: Combo) -> Result<usize> {
    let engine = combo.engine.program_name();
    image::ensure_probe_image(engine)?;
    let mut count = 0;
    let mut wrong = Vec::new();

    // 1. The isolation probe, from inside, with a read-only workspace owned by 65534.
    let ro = Folder::new(&unique(&combo, "ro"), (65534, 65534))?;
    let executor = ContainerExecutor::new(
        combo
            .builder(image::PROBE_IMAGE)
            .workspace(&ro.0)
            .env("AGENTGUARD_E2E_CONFIGURED", "yes")
            .command("probe", ["sh", "-c", PROBE])
            .command("memhog", ["sh", "-c", "head -c 900m /dev/zero | tail > /dev/null"])
            .command("forkbomb", ["sh", "-c", "n=0; while [ $n -lt 300 ]; do sleep 5 & n=$((n+1)); done; wait"])
            .command("ordinary", ["sh", "-c", "i=0; while [ $i -lt 40 ]; do sh -c true; i=$((i+1)); done; for j in 1 2 3 4 5 6 7 8; do sleep 0.2 & done; wait; echo ordinary-ok"])
            .command("flood", ["yes", "flood"])
            .timeout(Duration::from_secs(60))
            .max_output_bytes(4096)
            .build()?,
    );
    let probe = executor.run("probe").await?;
    let stdout = String::from_utf8_lossy(&probe.stdout).into_owned();
    if probe.exit_code != Some(0) {
        bail!(
            "the probe exited {:?}\nstdout:\n{stdout}\nstderr:\n{}",
            probe.exit_code,
            String::from_utf8_lossy(&probe.stderr)
        );
    }
    let seen: BTreeMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once('=')).collect();
    for (key, check, want) in expectations(combo) {
        let got = seen.get(key).copied().unwrap_or("<missing>").trim();
        if check(got) {
            count += 1;
        } else {
            wrong.push(format!("{key}: got {got:?}, want {want}"));
        }
    }

    // 2. Limits and kills, from outside.
    let mut expect = |what: &str, ok: bool, detail: String| {
        if ok {
            count += 1;
        } else {
            wrong.push(format!("{what}: {detail}"));
        }
    };
    let mem = executor.run("memhog").await?;
    expect(
        "memory limit (900 MiB in a 512 MiB container is killed)",
        mem.status == RunStatus::Killed,
        summary(&mem),
    );
    let bomb = executor.run("forkbomb").await?;
    expect(
        "fork bomb contained (the run ends by itself, non-zero)",
        bomb.status == RunStatus::Exited && bomb.exit_code != Some(0),
        summary(&bomb),
    );
    let ordinary = executor.run("ordinary").await?;
    expect(
        "an ordinary script runs under the pids limit",
        ordinary.exit_code == Some(0)
            && String::from_utf8_lossy(&ordinary.stdout).contains("ordinary-ok"),
        summary(&ordinary),
    );
    let flood = executor.run("flood").await?;
    expect(
        "output flood capped at 4096 bytes and killed",
        flood.status == RunStatus::OutputLimit
            && flood.truncated
            && flood.stdout.len() + flood.stderr.len() == 4096,
        summary(&flood),
    );
    let slow = ContainerExecutor::new(
        combo
            .builder(image::PROBE_IMAGE)
            .command("sleepy", ["sleep", "60"])
            .timeout(Duration::from_secs(2))
            .build()?,
    );
    let sleepy = slow.run("sleepy").await?;
    expect(
        "timeout kills the container",
        sleepy.status == RunStatus::TimedOut && sleepy.duration < Duration::from_secs(30),
        summary(&sleepy),
    );

    // 3. A read-write workspace: files written inside belong to the configured user on the host.
    let rw = Folder::new(&unique(&combo, "rw"), (1234, 2345))?;
    let writer = ContainerExecutor::new(
        combo
            .builder(image::PROBE_IMAGE)
            .workspace(&rw.0)
            .workspace_mode(WorkspaceMode::ReadWrite)
            .user("1234:2345")
            .command(
                "write",
                ["sh", "-c", "echo written > /workspace/out && id -u"],
            )
            .build()?,
    );
    let write = writer.run("write").await?;
    let meta = fs::metadata(rw.0.join("out"));
    expect(
        "rw workspace: the file written inside is owned by 1234:2345 on the host",
        write.exit_code == Some(0)
            && meta
                .as_ref()
                .is_ok_and(|m| m.uid() == 1234 && m.gid() == 2345),
        format!(
            "{}; {:?}",
            summary(&write),
            meta.map(|m| (m.uid(), m.gid()))
        ),
    );

    // 4. The headline example, through the `agentguard run` binary.
    let (ok, detail) = pytest_example(combo)?;
    expect(
        "pytest example reports \"1 failed, 1 passed\" as a result (check = false)",
        ok,
        detail,
    );

    // 5. Crash safety and image pins, through the binary (engine default runtimes only: the
    // behaviour is the engine's, not the runtime's).
    if !combo.gvisor() {
        for (what, ok, detail) in crash_safety(combo)? {
            expect(&what, ok, detail);
        }
    }

    // 6. Nothing left behind: no container with our owner label, no gVisor sandbox process.
    let filter = format!("label=agentguard.owner={}", std::process::id());
    let left = cmd::output(engine, &["ps", "-a", "-q", "--filter", &filter])?;
    expect(
        "no container left behind",
        cmd::stdout_text(&left).is_empty(),
        cmd::stdout_text(&left),
    );
    if combo.gvisor() {
        let mut sandboxes = String::new();
        for _ in 0..50 {
            sandboxes = cmd::stdout_text(&cmd::output("pgrep", &["-f", "runsc-sandbox"])?);
            if sandboxes.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        expect(
            "no runsc-sandbox process left behind",
            sandboxes.is_empty(),
            sandboxes,
        );
    }

    if !wrong.is_empty() {
        bail!("{}", wrong.join("\n"));
    }
    Ok(count)
}

fn summary(r: &RunResult) -> String {
    format!(
        "status {} exit {:?} in {:?}, {} bytes out; stderr {:?}",
        r.status.as_str(),
        r.exit_code,
        r.duration,
        r.stdout.len(),
        String::from_utf8_lossy(&r.stderr)
            .chars()
            .take(200)
            .collect::<String>()
    )
}

/// Waits (bounded) until a container owned by `pid` exists; returns its ID.
fn wait_for_container(engine: &str, pid: u32) -> Result<String> {
    let filter = format!("label=agentguard.owner={pid}");
    for _ in 0..200 {
        let id = cmd::stdout_text(&cmd::output(engine, &["ps", "-q", "--filter", &filter])?);
        if !id.is_empty() {
            return Ok(id);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("no container owned by pid {pid} appeared within 20 s")
}

fn container_exists(engine: &str, id: &str) -> Result<bool> {
    Ok(!cmd::stdout_text(&cmd::output(
        engine,
        &["ps", "-a", "-q", "--filter", &format!("id={id}")],
    )?)
    .is_empty())
}

/// SIGTERM of `agentguard run` kills its container; after a SIGKILL the container is left
/// running and `agentguard gc` removes it; an image pinned by ID runs, a wrong pin is refused.
fn crash_safety(combo: Combo) -> Result<Vec<(String, bool, String)>> {
    let engine = combo.engine.program_name();
    let binary = cmd::root().join("target/debug/agentguard");
    let dir = Folder::new(&unique(&combo, "crash"), (0, 0))?;
    let runtime = combo
        .runtime
        .map(|r| format!("runtime = \"{r}\"\n"))
        .unwrap_or_default();
    let write_config = |name: &str, image: &str| -> Result<PathBuf> {
        let path = dir.0.join(name);
        fs::write(
            &path,
            format!(
                "image = \"{image}\"\nengine = \"{engine}\"\n{runtime}timeout = 120\n\n[commands]\nsleepy = [\"sleep\", \"60\"]\nnoop = [\"true\"]\n"
            ),
        )?;
        Ok(path)
    };
    let config = write_config("agentguard.toml", image::PROBE_IMAGE)?;
    let mut results = Vec::new();

    let mut child = Command::new(&binary)
        .args(["run", "--config"])
        .arg(&config)
        .arg("sleepy")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let id = wait_for_container(engine, child.id())?;
    cmd::output("kill", &["-TERM", &child.id().to_string()])?;
    let status = child.wait()?;
    let gone = !container_exists(engine, &id)?;
    results.push((
        "SIGTERM of agentguard run kills and removes its container (exit 143)".to_owned(),
        status.code() == Some(143) && gone,
        format!("exit {status}, container gone: {gone}"),
    ));

    let mut child = Command::new(&binary)
        .args(["run", "--config"])
        .arg(&config)
        .arg("sleepy")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let id = wait_for_container(engine, child.id())?;
    child.kill()?;
    child.wait()?;
    let survived = container_exists(engine, &id)?;
    let gc = Command::new(&binary).arg("gc").output()?;
    let removed = !container_exists(engine, &id)?;
    results.push((
        "after a SIGKILL of agentguard the container is left running, and agentguard gc removes it"
            .to_owned(),
        survived && removed && gc.status.success(),
        format!(
            "survived: {survived}, removed: {removed}, gc said: {}",
            String::from_utf8_lossy(&gc.stdout).trim()
        ),
    ));

    let doctor = Command::new(&binary)
        .arg("doctor")
        .env("AGENTGUARD_CONFIG", &config)
        .output()?;
    let said = String::from_utf8_lossy(&doctor.stdout).into_owned();
    results.push((
        "agentguard doctor's trivial hardened run of the configured image succeeds".to_owned(),
        said.lines()
            .any(|l| l.starts_with("ok") && l.contains("a trivial hardened run of")),
        said,
    ));

    let image_id = cmd::stdout_text(&cmd::output(
        engine,
        &[
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            image::PROBE_IMAGE,
        ],
    )?);
    let pinned = write_config(
        "pinned.toml",
        &format!("sha256:{}", image_id.trim_start_matches("sha256:")),
    )?;
    let ok = Command::new(&binary)
        .args(["run", "--config"])
        .arg(&pinned)
        .arg("noop")
        .output()?;
    let wrong = write_config("wrong.toml", &format!("sha256:{}", "0".repeat(64)))?;
    let refused = Command::new(&binary)
        .args(["run", "--config"])
        .arg(&wrong)
        .arg("noop")
        .output()?;
    results.push((
        "an image pinned by ID runs; a wrong ID is refused as an engine error".to_owned(),
        ok.status.success() && refused.status.code() == Some(125),
        format!(
            "pinned: {} {}; wrong: {} {}",
            ok.status,
            String::from_utf8_lossy(&ok.stderr).trim(),
            refused.status,
            String::from_utf8_lossy(&refused.stderr).trim()
        ),
    ));
    Ok(results)
}

/// Runs `python3 -m pytest -q` on a read-only workspace with one passing and one failing test,
/// through `agentguard run --json` with a config file, as a user would.
fn pytest_example(combo: Combo) -> Result<(bool, String)> {
    let engine = combo.engine.program_name();
    image::ensure_pytest_image(engine)?;
    let dir = Folder::new(&unique(&combo, "pytest"), (0, 0))?;
    fs::create_dir_all(dir.0.join("workspace"))?;
    fs::write(
        dir.0.join("workspace/test_example.py"),
        "def test_passes():\n    assert 1 + 1 == 2\n\n\ndef test_fails():\n    assert 1 + 1 == 3\n",
    )?;
    let runtime = combo
        .runtime
        .map(|r| format!("runtime = \"{r}\"\n"))
        .unwrap_or_default();
    fs::write(
        dir.0.join("agentguard.toml"),
        format!(
            "image = \"{}\"\nengine = \"{engine}\"\n{runtime}workspace = \"workspace\"\ntimeout = 120\ncheck = false\n\n[environment]\nCI = \"1\"\n\n[commands]\nrun_tests = [\"python3\", \"-m\", \"pytest\", \"-q\", \"-p\", \"no:cacheprovider\"]\n\n[audit]\npath = \"audit.jsonl\"\n",
            image::PYTEST_IMAGE
        ),
    )?;
    let binary = cmd::root().join("target/debug/agentguard");
    let out = Command::new(&binary)
        .args(["run", "--config"])
        .arg(dir.0.join("agentguard.toml"))
        .args(["run_tests", "--json"])
        .output()
        .context("running agentguard run")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_default();
    let stdout = value["stdout"].as_str().unwrap_or_default();
    let audited = Command::new(&binary)
        .args(["audit", "verify"])
        .arg(dir.0.join("audit.jsonl"))
        .output()?;
    let ok = out.status.code() == Some(1)
        && value["status"] == "exited"
        && value["exit_code"] == 1
        && stdout.contains("1 failed, 1 passed")
        && audited.status.success();
    let last = stdout.lines().last().unwrap_or_default().to_owned();
    println!("   {}: pytest in the container said: {last}", combo.label());
    Ok((
        ok,
        format!(
            "exit {:?}, json {text}, stderr {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
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
            "tmp_cap",
            Box::new(|got: &str| {
                got.parse::<u64>()
                    .is_ok_and(|n| n <= 64 << 20 && n > 32 << 20)
            }),
            "a 70 MB write to /tmp stops at the 64 MiB cap",
        ),
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
        // gVisor shows neither NoNewPrivs nor the cgroup files inside; its limits are proved
        // from outside (the memory, fork bomb and ordinary-script runs).
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

//! `cargo xtask e2e`: the isolation tests of `tests/e2e` on every engine and runtime here.
//!
//! It builds the binary and the images (without a registry), then for each engine/runtime
//! combination runs `cargo test -p agentguard-e2e` with `AGENTGUARD_E2E_ENGINE` and friends
//! set, one test at a time, and checks from outside that nothing was left behind. A missing
//! combination is SKIPPED loudly; one named by `--require` fails the run, so CI can never pass
//! by skipping. The test process runs with a canary variable and a proxy variable in its
//! environment, which the probe proves never reach a container.

use std::process::Command;
use std::time::Duration;

use agentguard_container::{EngineKind, LABEL_OWNER};
use anyhow::{Context, Result, bail};

use crate::{cmd, image, setup};

/// One engine and runtime to test.
#[derive(Debug, Clone, Copy)]
struct Combo {
    engine: EngineKind,
    /// `None` for Docker's default runtime (runc); Podman always names one, since its default
    /// (crun) does not work on cgroup v1 hybrid hosts like ours (ENGINES.md).
    runtime: Option<&'static str>,
}

impl Combo {
    fn label(&self) -> String {
        format!("{}+{}", self.engine, self.runtime.unwrap_or("runc"))
    }

    fn gvisor(&self) -> bool {
        self.runtime == Some("runsc")
    }

    fn available(&self, engines: &setup::Engines) -> bool {
        match (self.engine, self.gvisor()) {
            (EngineKind::Docker, false) => engines.docker,
            (EngineKind::Docker, true) => engines.docker_runsc,
            (EngineKind::Podman, false) => engines.podman,
            (EngineKind::Podman, true) => engines.podman_runsc,
            // The runtime called directly; the images come from Docker's store.
            (EngineKind::Oci, gvisor) => {
                engines.docker
                    && agentguard_container::on_path(if gvisor { "runsc" } else { "runc" })
            }
        }
    }

    fn required(&self, require: &[String]) -> bool {
        let has = |word: &str| require.iter().any(|r| r == word);
        has(self.engine.program_name()) || (self.gvisor() && has("runsc"))
    }
}

const COMBOS: [Combo; 6] = [
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
    Combo {
        engine: EngineKind::Oci,
        runtime: Some("runc"),
    },
    Combo {
        engine: EngineKind::Oci,
        runtime: Some("runsc"),
    },
];

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
            if !["docker", "podman", "oci", "runsc"].contains(&word) {
                bail!(
                    "--require: unknown engine or runtime {word:?}; expected docker, podman, oci or runsc"
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
    let binary = cmd::debug_binary()?;
    // Build the tests once, before the first combination.
    cmd::run(
        "cargo",
        &["test", "--quiet", "--package", "agentguard-e2e", "--no-run"],
    )?;
    let engines = setup::detect();
    let mut failures = Vec::new();
    let (mut passed, mut skipped) = (0, 0);
    for combo in COMBOS {
        let label = combo.label();
        if !combo.available(&engines) {
            eprintln!(
                "!!!!! SKIPPED {label}: not available on this machine (run `cargo xtask setup`) !!!!!"
            );
            skipped += 1;
            if combo.required(&require) {
                failures.push(format!("{label} is required (--require) but not available"));
            }
            continue;
        }
        match test_combo(combo, &binary) {
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

/// Runs the e2e tests for one combination, then the leftover checks; returns how many checks
/// passed (tests plus leftover checks).
fn test_combo(combo: Combo, binary: &std::path::Path) -> Result<usize> {
    let engine = combo.engine.program_name();
    // engine = "oci" takes its images from Docker's store.
    let store = match combo.engine {
        EngineKind::Oci => "docker",
        _ => engine,
    };
    image::ensure_probe_image(store)?;
    image::ensure_pytest_image(store)?;
    let runs = runs_dir()?;
    let mut command = Command::new("cargo");
    command
        .args(["test", "--quiet", "--package", "agentguard-e2e", "--"])
        .args(["--test-threads=1", "--nocapture"])
        .current_dir(cmd::root())
        .env("AGENTGUARD_E2E_ENGINE", engine)
        .env("AGENTGUARD_E2E_PROBE_IMAGE", image::PROBE_IMAGE)
        .env("AGENTGUARD_E2E_PYTEST_IMAGE", image::PYTEST_IMAGE)
        .env("AGENTGUARD_E2E_BINARY", binary)
        // The run folders of egress runs, so the leftover check can see them all.
        .env("AGENTGUARD_RUN_DIR", &runs)
        // The independent MCP client (PyPI `mcp`), installed by setup.
        .env("AGENTGUARD_E2E_MCP_PYTHON", setup::mcp_python())
        // Must never reach a container: the executor passes only a short list to the engine.
        .env("AGENTGUARD_E2E_CANARY", "leaked-from-host")
        // The non-root user of the rootless Podman checks.
        .env("AGENTGUARD_E2E_ROOTLESS_USER", setup::ROOTLESS_USER)
        .env("HTTP_PROXY", "http://127.0.0.1:9");
    match combo.runtime {
        Some(runtime) => command.env("AGENTGUARD_E2E_RUNTIME", runtime),
        None => command.env_remove("AGENTGUARD_E2E_RUNTIME"),
    };
    let output = command.output().context("running cargo test")?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    for line in text.lines().filter(|l| l.contains("in the container said")) {
        println!("   {}", line.trim_start_matches('.'));
    }
    if !output.status.success() {
        bail!(
            "tests failed:\n{text}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let tests = passed_count(&text).context("no `test result` line in the cargo test output")?;
    // The probe test checks many properties in one container; count each, as a reviewer reads
    // them.
    // The probe tests check many properties in one container each; count each, as a
    // reviewer reads them.
    let reported = |what: &str| {
        // "LABEL: N properties ..." (the egress line also ends in the plain line's words).
        text.lines()
            .filter_map(|l| l.split_once(what))
            .find_map(|(before, _)| before.rsplit(' ').next()?.parse::<usize>().ok())
            .with_context(|| format!("a probe test did not report its{what}"))
    };
    let inside = reported(" properties checked from inside")?;
    let egress = reported(" egress properties checked from inside")?;
    Ok(tests.saturating_sub(2) + inside + egress + leftovers(combo, &runs)?)
}

/// engine = "oci": no container in the runtime's state folder, no bundle folder.
fn oci_leftovers(combo: Combo) -> Result<()> {
    let runtime = combo.runtime.unwrap_or("runc");
    let root = std::path::Path::new(agentguard_container::oci::STATE_ROOT).join(runtime);
    let state = root.join("state");
    let listed = cmd::output(
        runtime,
        &["--root", &state.to_string_lossy(), "list", "--quiet"],
    )?;
    if !cmd::stdout_text(&listed).is_empty() {
        bail!(
            "{runtime} containers left behind: {}",
            cmd::stdout_text(&listed)
        );
    }
    let bundles: Vec<String> = std::fs::read_dir(root.join("bundles"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if !bundles.is_empty() {
        bail!("bundles left behind under {}: {bundles:?}", root.display());
    }
    Ok(())
}

/// `target/e2e/runs`, created private (mode 0700) as run folders require.
fn runs_dir() -> Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runs = cmd::root().join("target/e2e/runs");
    std::fs::create_dir_all(&runs).with_context(|| format!("creating {}", runs.display()))?;
    std::fs::set_permissions(&runs, std::fs::Permissions::from_mode(0o700))?;
    Ok(runs)
}

/// The number of passed tests in libtest's summary lines.
fn passed_count(text: &str) -> Option<usize> {
    let counts: Vec<usize> = text
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// Nothing left behind: no container with an agentguard owner label, no run folder (socket,
/// relay copy), no relay process, and under gVisor no sandbox process (a failed start can
/// leave one running while the engine lists nothing).
fn leftovers(combo: Combo, runs: &std::path::Path) -> Result<usize> {
    let engine = combo.engine.program_name();
    if combo.engine == EngineKind::Oci {
        oci_leftovers(combo)?;
    } else {
        let filter = format!("label={LABEL_OWNER}");
        let left = cmd::output(engine, &["ps", "-a", "-q", "--filter", &filter])?;
        if !cmd::stdout_text(&left).is_empty() {
            bail!("containers left behind: {}", cmd::stdout_text(&left));
        }
    }
    let folders: Vec<String> = std::fs::read_dir(runs)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if !folders.is_empty() {
        bail!("run folders left behind in {}: {folders:?}", runs.display());
    }
    // The relay and its forwarder, by their argv[0] (an engine client's argv names it later).
    let relays = cmd::stdout_text(&cmd::output("pgrep", &["-af", "^/run/agentguard/relay "])?);
    if !relays.is_empty() {
        bail!("relay processes left behind: {relays}");
    }
    if !combo.gvisor() {
        return Ok(3);
    }
    let mut sandboxes = String::new();
    for _ in 0..50 {
        sandboxes = cmd::stdout_text(&cmd::output("pgrep", &["-f", "runsc-sandbox"])?);
        if sandboxes.is_empty() {
            return Ok(4);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!("runsc-sandbox processes left behind: {sandboxes}")
}

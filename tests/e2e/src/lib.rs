//! The environment of the e2e tests: which engine and runtime to test, the images, the
//! binary, and folders owned by a given user. `cargo xtask e2e` sets it up and runs
//! `cargo test -p agentguard-e2e` once per engine/runtime combination.
//!
//! The tests check the environment, not a cfg (matklad): without `AGENTGUARD_E2E_ENGINE`
//! every test prints a loud SKIPPED line and passes, so `cargo test --workspace` runs on any
//! machine, and `cargo xtask e2e --require ...` is what makes a missing engine fail.

#![warn(missing_docs)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agentguard_container::{
    ContainerExecutor, ContainerSpec, ContainerSpecBuilder, Engine, EngineKind, RunResult,
};
use anyhow::{Context, Result, bail, ensure};

/// The probe, run with `sh -c` inside the container.
pub const PROBE: &str = include_str!("../probe.sh");

/// The engine to test: `docker`, `podman` or `oci`.
pub const ENV_ENGINE: &str = "AGENTGUARD_E2E_ENGINE";
/// The OCI runtime (`runc`, `runsc`); unset means the engine's default.
pub const ENV_RUNTIME: &str = "AGENTGUARD_E2E_RUNTIME";
/// The busybox probe image, built by xtask.
pub const ENV_PROBE_IMAGE: &str = "AGENTGUARD_E2E_PROBE_IMAGE";
/// The debootstrap image with python3 and pytest, built by xtask.
pub const ENV_PYTEST_IMAGE: &str = "AGENTGUARD_E2E_PYTEST_IMAGE";
/// The `agentguard` binary to test.
pub const ENV_BINARY: &str = "AGENTGUARD_E2E_BINARY";
/// A variable set in the test's environment that must never reach a container.
pub const CANARY: &str = "AGENTGUARD_E2E_CANARY";

/// One engine and runtime under test, and what xtask prepared for it.
#[derive(Debug, Clone)]
pub struct Combo {
    /// The engine family.
    pub engine: EngineKind,
    /// `None` for the engine's default runtime.
    pub runtime: Option<String>,
    /// The busybox probe image.
    pub probe_image: String,
    /// The pytest image.
    pub pytest_image: String,
    /// The `agentguard` binary.
    pub binary: PathBuf,
}

impl Combo {
    /// The combination to test, or `None` (after a loud SKIPPED line) when e2e is not set up.
    pub fn from_env(test: &str) -> Result<Option<Combo>> {
        let Some(engine) = std::env::var_os(ENV_ENGINE) else {
            // Written to the stderr handle, not with `eprintln!`, so that the test harness
            // does not capture it: a skip is always visible.
            let _ = writeln!(
                std::io::stderr(),
                "!!!!! SKIPPED e2e {test}: {ENV_ENGINE} is not set (run `cargo xtask e2e`) !!!!!"
            );
            return Ok(None);
        };
        let engine = match engine.to_str() {
            Some("docker") => EngineKind::Docker,
            Some("podman") => EngineKind::Podman,
            Some("oci") => EngineKind::Oci,
            other => bail!("{ENV_ENGINE}={other:?}: expected docker, podman or oci"),
        };
        // Podman with runsc leaves an empty `oom` file in its working folder when a container
        // is OOM-killed: run the engines from target/e2e, never from the source tree.
        let scratch = workspace_root().join("target/e2e");
        fs::create_dir_all(&scratch)?;
        std::env::set_current_dir(&scratch)?;
        let var = |name: &str| {
            std::env::var(name)
                .with_context(|| format!("{name} is not set (run `cargo xtask e2e`)"))
        };
        Ok(Some(Combo {
            engine,
            runtime: std::env::var(ENV_RUNTIME).ok().filter(|r| !r.is_empty()),
            probe_image: var(ENV_PROBE_IMAGE)?,
            pytest_image: var(ENV_PYTEST_IMAGE)?,
            binary: PathBuf::from(var(ENV_BINARY)?),
        }))
    }

    /// `docker+runc`, `podman+runsc`, ...
    pub fn label(&self) -> String {
        format!(
            "{}+{}",
            self.engine,
            self.runtime.as_deref().unwrap_or("runc")
        )
    }

    /// True under gVisor.
    pub fn gvisor(&self) -> bool {
        self.runtime.as_deref() == Some("runsc")
    }

    /// The engine's program name.
    pub fn program(&self) -> &'static str {
        self.engine.program_name()
    }

    /// The engine whose image store holds the images: the engine, or for `engine = "oci"`
    /// Docker (whose store xtask fills and the runtime's cache is taken from).
    pub fn store(&self) -> &'static str {
        match self.engine {
            EngineKind::Oci => "docker",
            _ => self.program(),
        }
    }

    /// A spec builder for this engine and runtime with `image`.
    pub fn builder(&self, image: &str) -> ContainerSpecBuilder {
        let engine = Engine::parse(self.engine.program_name()).expect("a known engine");
        let builder = ContainerSpec::builder(image).engine(engine);
        match &self.runtime {
            Some(runtime) => builder.runtime(runtime),
            None => builder,
        }
    }

    /// An executor of `spec`; for `engine = "oci"` every run takes the receipt with the relay
    /// (its init), installed once per test process.
    pub fn executor(&self, spec: ContainerSpec) -> Result<ContainerExecutor> {
        let executor = ContainerExecutor::new(spec);
        if self.engine != EngineKind::Oci {
            return Ok(executor);
        }
        let dir = workspace_root().join(format!("target/e2e/relay-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let path = dir.join("relay");
        if !path.exists() {
            agentguard_sandbox::relay::RelayProgram::embedded()?.install(&path)?;
        }
        Ok(executor.with_receipt(path))
    }

    /// The containers (names or IDs) that agentguard process `owner` started and that still
    /// exist, one per line; empty when none.
    pub fn containers_of(&self, owner: u32) -> Result<String> {
        if self.engine != EngineKind::Oci {
            let filter = format!("label={}={owner}", agentguard_container::LABEL_OWNER);
            return Ok(stdout_text(&output(
                self.program(),
                &["ps", "-a", "-q", "--filter", &filter],
            )?));
        }
        let mut names = Vec::new();
        for bundle in fs::read_dir(self.oci_root().join("bundles"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let config = fs::read_to_string(bundle.path().join("config.json")).unwrap_or_default();
            let config: serde_json::Value = serde_json::from_str(&config).unwrap_or_default();
            let label = config["annotations"][agentguard_container::LABEL_OWNER].as_str();
            if label == Some(owner.to_string().as_str()) {
                names.push(bundle.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names.join("\n"))
    }

    /// True while the container `id` (as [`Combo::containers_of`] names it) exists.
    pub fn container_exists(&self, id: &str) -> Result<bool> {
        if self.engine != EngineKind::Oci {
            let filter = format!("id={id}");
            return Ok(!stdout_text(&output(
                self.program(),
                &["ps", "-a", "-q", "--filter", &filter],
            )?)
            .is_empty());
        }
        let state = self.oci_root().join("state");
        let runtime = self.runtime.as_deref().unwrap_or("runc");
        let known = output(runtime, &["--root", &state.to_string_lossy(), "state", id])?;
        Ok(known.status.success() || self.oci_root().join("bundles").join(id).exists())
    }

    /// engine = "oci": the runtime's folder of state and bundles.
    fn oci_root(&self) -> PathBuf {
        Path::new(agentguard_container::oci::STATE_ROOT)
            .join(self.runtime.as_deref().unwrap_or("runc"))
    }

    /// The `runtime = "..."` line of a config file, or nothing.
    pub fn runtime_line(&self) -> String {
        self.runtime
            .as_ref()
            .map(|r| format!("runtime = \"{r}\"\n"))
            .unwrap_or_default()
    }

    /// A name unique to this process, combination and purpose.
    pub fn unique(&self, what: &str) -> String {
        format!(
            "e2e-{}-{}-{what}",
            std::process::id(),
            self.label().replace('+', "-")
        )
    }
}

/// A folder under the workspace's `target/` with a marker file, owned by `owner`, removed on
/// drop.
#[derive(Debug)]
pub struct Folder(pub PathBuf);

impl Folder {
    /// Creates the folder (mode 0755) with `marker` in it, owned by `owner` (e2e runs as root).
    pub fn new(name: &str, owner: (u32, u32)) -> Result<Folder> {
        let path = workspace_root().join("target/e2e").join(name);
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

    /// A path inside the folder.
    pub fn join(&self, rest: impl AsRef<Path>) -> PathBuf {
        self.0.join(rest)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Runs a command quietly and returns its output, whatever the exit status.
pub fn output(program: &str, args: &[&str]) -> Result<Output> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {program}"))
}

/// The absolute path of `program` on `PATH`.
pub fn which(program: &str) -> Result<String> {
    let out = output("sh", &["-c", &format!("command -v {program}")])?;
    let path = stdout_text(&out);
    ensure!(path.starts_with('/'), "{program} is not on PATH");
    Ok(path)
}

/// Text of stdout, trimmed.
pub fn stdout_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A one-line description of a run, for failure messages.
pub fn summary(r: &RunResult) -> String {
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

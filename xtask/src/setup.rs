//! Installs and starts what the tests need: Docker (with gVisor registered), Podman, runc,
//! runsc, busybox-static, debootstrap, and the real clients (curl, python3) of the proxy tests.
//!
//! Shared by `cargo xtask setup`, `demo` and `ci`, and so by `.ci/run`: a fresh Debian machine
//! has none of these, and a green CI must never depend on something installed by hand. Every
//! step says what it does; where it cannot act (not root, not Debian) it prints the exact
//! commands instead and fails.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cmd;

/// Debian packages, each with a file that shows it is installed.
const PACKAGES: &[(&str, &str)] = &[
    ("docker.io", "/usr/sbin/dockerd"),
    ("podman", "/usr/bin/podman"),
    ("runc", "/usr/sbin/runc"),
    ("runsc", "/usr/bin/runsc"),
    ("busybox-static", "/var/lib/dpkg/info/busybox-static.list"),
    ("debootstrap", "/usr/sbin/debootstrap"),
    ("catatonit", "/usr/libexec/podman/catatonit"),
    // newuidmap/newgidmap for the rootless Podman user of the e2e suite.
    ("uidmap", "/usr/bin/newuidmap"),
    // Real clients for the egress proxy tests.
    ("curl", "/usr/bin/curl"),
    // The test CA of the Python package's tests.
    ("openssl", "/usr/bin/openssl"),
    ("python3", "/usr/bin/python3"),
    // The venv of the independent MCP client (PyPI `mcp`) of the e2e suite.
    ("python3-venv", "/usr/lib/python3.11/ensurepip/__init__.py"),
    // Podman's image trust policy; without it every `podman import` fails.
    (
        "golang-github-containers-common",
        "/etc/containers/policy.json",
    ),
];

const DAEMON_JSON: &str = "/etc/docker/daemon.json";
const RUNSC: &str = "/usr/bin/runsc";

/// What is usable after set-up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Engines {
    pub(crate) docker: bool,
    pub(crate) docker_runsc: bool,
    pub(crate) podman: bool,
    pub(crate) podman_runsc: bool,
}

/// Installs what is missing, registers runsc with Docker, starts dockerd; reports the result.
pub(crate) fn run() -> Result<Engines> {
    println!("== setup: container engines");
    install_packages()?;
    ensure_cargo_fuzz()?;
    MCP_VENV.ensure()?;
    K8S_VENV.ensure()?;
    ensure_kubectl()?;
    register_runsc_with_docker()?;
    start_dockerd()?;
    ensure_rootless_user()?;
    let engines = detect();
    println!(
        "   docker: {}, docker+runsc: {}, podman: {}, podman+runsc: {}",
        yes(engines.docker),
        yes(engines.docker_runsc),
        yes(engines.podman),
        yes(engines.podman_runsc)
    );
    Ok(engines)
}

/// A venv under `target/xtask/` with pinned PyPI packages: what the tests drive.
pub(crate) struct Venv {
    /// The folder name under `target/xtask/`.
    pub(crate) name: &'static str,
    /// The interpreter: `None` for this machine's `python3`, or a pyenv version prefix
    /// (`3.9`: the newest `3.9.*` under `$PYENV_ROOT/versions`).
    pub(crate) python: Option<&'static str>,
    /// `name==version` requirements.
    pub(crate) packages: &'static [&'static str],
    /// What the set-up line calls it.
    pub(crate) what: &'static str,
}

/// The Python MCP client of the e2e suite (MCP.md 4.2).
pub(crate) const MCP_VENV: Venv = Venv {
    name: "venv-mcp",
    python: None,
    packages: &["mcp==2.3.0"],
    what: "python mcp client",
};

/// The manifest validators of the Kubernetes goldens (KUBERNETES.md section 4), and the API
/// emulator of the kubectl executor's tests.
pub(crate) const K8S_VENV: Venv = Venv {
    name: "venv-k8s",
    python: None,
    packages: &[
        "kubernetes-validate==1.37.0",
        "checkov==3.3.30",
        "kmock==0.8",
    ],
    what: "kubernetes tools",
};

impl Venv {
    /// The venv's folder.
    pub(crate) fn dir(&self) -> std::path::PathBuf {
        cmd::root().join("target/xtask").join(self.name)
    }

    /// A program in the venv's `bin/`.
    pub(crate) fn bin(&self, program: &str) -> std::path::PathBuf {
        self.dir().join("bin").join(program)
    }

    /// Creates the venv and installs the packages unless those versions are there.
    pub(crate) fn ensure(&self) -> Result<()> {
        let python = self.bin("python");
        let checks: Vec<String> = self
            .packages
            .iter()
            .filter_map(|p| p.split_once("=="))
            .map(|(name, version)| format!("assert m.version({name:?}) == {version:?}"))
            .collect();
        let check = format!("import importlib.metadata as m; {}", checks.join("; "));
        if python.exists() && cmd::succeeds(&python.to_string_lossy(), &["-c", &check]) {
            println!("   {}: present ({})", self.what, self.packages.join(", "));
            return Ok(());
        }
        let dir = self.dir();
        println!(
            "   {}: creating {} with {}",
            self.what,
            dir.display(),
            self.packages.join(", ")
        );
        let interpreter = self.interpreter()?;
        cmd::run(&interpreter, &["-m", "venv", &dir.to_string_lossy()])?;
        let mut args = vec![
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ];
        args.extend(self.packages.iter().copied());
        cmd::run(&python.to_string_lossy(), &args)
    }

    /// The program the venv is made with.
    fn interpreter(&self) -> Result<String> {
        let Some(prefix) = self.python else {
            return Ok("python3".to_owned());
        };
        let root = std::env::var_os("PYENV_ROOT")
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")))
            .context("neither PYENV_ROOT nor HOME is set")?;
        let versions = root.join("versions");
        let mut found: Vec<(Vec<u32>, std::path::PathBuf)> = fs::read_dir(&versions)
            .with_context(|| format!("listing {} (pyenv's versions)", versions.display()))?
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let rest = name.strip_prefix(prefix)?.strip_prefix('.')?;
                let patch: u32 = rest.parse().ok()?;
                let python = entry.path().join("bin/python3");
                python.exists().then_some((vec![patch], python))
            })
            .collect();
        found.sort();
        match found.pop() {
            Some((_, python)) => Ok(python.to_string_lossy().into_owned()),
            None => bail!(
                "no CPython {prefix}.* under {}: install it with `pyenv install {prefix}` (the machine image has it)",
                versions.display()
            ),
        }
    }
}

/// The venv's python with the MCP client.
pub(crate) fn mcp_python() -> std::path::PathBuf {
    MCP_VENV.bin("python")
}

/// kubectl, which the kubectl executor's tests drive against kmock (the machine image has it).
fn ensure_kubectl() -> Result<()> {
    if cmd::succeeds("kubectl", &["version", "--client", "-o", "json"]) {
        println!("   kubectl: present");
        return Ok(());
    }
    println!("   kubectl: missing, installing the Debian package");
    cmd::run("apt-get", &["install", "-y", "-q", "kubectl"]).context(
        "kubectl is needed by the kubectl executor's tests; install it (`apt-get install kubectl`)",
    )
}

/// `cargo fuzz` with a nightly toolchain, for the fuzz targets CI builds and runs.
fn ensure_cargo_fuzz() -> Result<()> {
    if !cmd::succeeds("cargo", &["+nightly", "--version"]) {
        bail!(
            "no nightly Rust toolchain: the fuzz targets need one (`rustup toolchain install nightly`)"
        );
    }
    if cmd::succeeds("cargo", &["fuzz", "--version"]) {
        println!("   cargo-fuzz: present");
        return Ok(());
    }
    println!("   installing cargo-fuzz from crates.io");
    cmd::run("cargo", &["install", "cargo-fuzz", "--locked"])
}

fn yes(found: bool) -> &'static str {
    if found { "ready" } else { "MISSING" }
}

fn is_root() -> bool {
    cmd::output("id", &["-u"]).is_ok_and(|o| cmd::stdout_text(&o) == "0")
}

fn install_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, marker)| !Path::new(marker).exists())
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        println!("   packages: all present");
        return Ok(());
    }
    let install = format!(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y {}",
        missing.join(" ")
    );
    if !is_root() || !Path::new("/etc/debian_version").exists() {
        bail!(
            "missing packages: {}. This set-up only installs on Debian as root; run:\n  sudo sh -c '{install}'\nthen start dockerd with runsc registered (see docs/containers.md)",
            missing.join(", ")
        );
    }
    println!("   installing: {}", missing.join(" "));
    cmd::run("apt-get", &["update", "-q"])?;
    // --reinstall with --force-confmiss also restores a configuration file that was deleted
    // while its package stayed installed.
    let mut args = vec![
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        "--reinstall",
        "-o",
        "Dpkg::Options::=--force-confmiss",
    ];
    args.extend(&missing);
    println!("$ apt-get {}", args.join(" "));
    let status = Command::new("apt-get")
        .args(&args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("starting apt-get")?;
    if !status.success() {
        bail!("apt-get install failed ({status}); run it by hand: {install}");
    }
    Ok(())
}

/// The non-root user whose rootless Podman the e2e suite drives (`useradd` gives it its
/// subordinate ids in /etc/subuid and /etc/subgid).
pub(crate) const ROOTLESS_USER: &str = "agentguard-rootless";

/// Creates [`ROOTLESS_USER`] and its 0700 runtime folder `/run/user/UID`, if missing.
fn ensure_rootless_user() -> Result<()> {
    if !cmd::succeeds("id", &["-u", ROOTLESS_USER]) {
        cmd::run(
            "useradd",
            &["--create-home", "--shell", "/bin/sh", ROOTLESS_USER],
        )?;
    }
    let uid = String::from_utf8_lossy(&cmd::output("id", &["-u", ROOTLESS_USER])?.stdout)
        .trim()
        .to_owned();
    let run = format!("/run/user/{uid}");
    std::fs::create_dir_all(&run)?;
    cmd::run(
        "chown",
        &[&format!("{ROOTLESS_USER}:{ROOTLESS_USER}"), &run],
    )?;
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    println!("   rootless podman user: {ROOTLESS_USER} (uid {uid})");
    Ok(())
}

/// Adds `runsc` (with `--network=none`, which Docker needs for `--network none` under gVisor)
/// to `/etc/docker/daemon.json`, keeping every other setting. Returns whether it changed.
fn register_runsc_with_docker() -> Result<bool> {
    let path = Path::new(DAEMON_JSON);
    let mut config: serde_json::Value = match fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => serde_json::from_str(&text)
            .with_context(|| format!("{DAEMON_JSON} is not valid JSON; fix or remove it"))?,
        Ok(_) => serde_json::json!({}),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::json!({}),
        Err(e) => return Err(e).with_context(|| format!("reading {DAEMON_JSON}")),
    };
    // --host-uds=open lets a sandbox connect to the egress proxy's socket mounted into it.
    let wanted =
        serde_json::json!({"path": RUNSC, "runtimeArgs": ["--network=none", "--host-uds=open"]});
    if config.pointer("/runtimes/runsc") == Some(&wanted) {
        return Ok(false);
    }
    let Some(object) = config.as_object_mut() else {
        bail!("{DAEMON_JSON} is not a JSON object; fix or remove it");
    };
    let runtimes = object
        .entry("runtimes")
        .or_insert_with(|| serde_json::json!({}));
    let Some(runtimes) = runtimes.as_object_mut() else {
        bail!("`runtimes` in {DAEMON_JSON} is not a JSON object; fix it");
    };
    runtimes.insert("runsc".into(), wanted);
    if !is_root() {
        bail!(
            "registering runsc needs root: add {{\"runtimes\":{{\"runsc\":{{\"path\":\"{RUNSC}\",\"runtimeArgs\":[\"--network=none\",\"--host-uds=open\"]}}}}}} to {DAEMON_JSON}"
        );
    }
    fs::create_dir_all("/etc/docker").context("creating /etc/docker")?;
    fs::write(path, serde_json::to_string_pretty(&config)? + "\n")
        .with_context(|| format!("writing {DAEMON_JSON}"))?;
    println!("   registered runsc in {DAEMON_JSON}");
    // A running daemon reloads its runtimes on SIGHUP.
    if cmd::succeeds("docker", &["info"]) {
        println!("   reloading dockerd (SIGHUP) to pick up runsc");
        let _ = cmd::output("pkill", &["-HUP", "-x", "dockerd"]);
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(true)
}

fn start_dockerd() -> Result<()> {
    if cmd::succeeds("docker", &["info"]) {
        println!("   dockerd: running");
        return Ok(());
    }
    if !is_root() {
        bail!(
            "dockerd is not running and starting it needs root: run `sudo dockerd` (or `sudo systemctl start docker`)"
        );
    }
    let log_path = cmd::root().join("target/dockerd.log");
    fs::create_dir_all(cmd::root().join("target"))?;
    let log =
        fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    println!("   starting dockerd (log: {})", log_path.display());
    // setsid: the daemon outlives this process and is not killed with its process group.
    Command::new("setsid")
        .arg("dockerd")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting dockerd")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if cmd::succeeds("docker", &["info"]) {
            println!("   dockerd: ready");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    bail!(
        "dockerd did not answer within 60 s; see {}",
        log_path.display()
    )
}

/// Which engine/runtime combinations are usable right now.
pub(crate) fn detect() -> Engines {
    let docker = cmd::succeeds("docker", &["info"]);
    let docker_runsc = docker
        && cmd::output("docker", &["info", "--format", "{{json .Runtimes}}"])
            .is_ok_and(|o| cmd::stdout_text(&o).contains("\"runsc\""));
    let podman = agentguard_container::on_path("podman")
        && agentguard_container::on_path("runc")
        && cmd::succeeds("podman", &["--runtime", "runc", "info"]);
    let podman_runsc = podman && agentguard_container::on_path("runsc");
    Engines {
        docker,
        docker_runsc,
        podman,
        podman_runsc,
    }
}

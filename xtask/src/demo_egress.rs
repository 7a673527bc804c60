//! Demo 6: the only way out. A `network = "egress"` command installs a package with pip
//! inside a hardened container, from an HTTPS package index on the host that it reaches only
//! through its own egress proxy; another command is refused a host off the allowlist; the
//! run's audit log shows both decisions; then the learn loop allows it (`demo_learn.rs`).

use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};

use agentguard_container::EngineKind;
use anyhow::{Result, bail};

use crate::image;

/// What demo 6 needs of the loopback peers.
pub(crate) struct Peers {
    pub(crate) dir: PathBuf,
    pub(crate) port: String,
    pub(crate) ns: String,
    pub(crate) ca_path: String,
}

pub(crate) fn run(
    agentguard: &Path,
    peers: &Peers,
    kind: EngineKind,
    runtime: Option<&str>,
) -> Result<()> {
    println!(
        "\n== demo 6/7: the only way out: pip inside a container whose network is its own egress proxy"
    );
    image::ensure_pytest_image(kind.program_name())?;
    let workspace = peers.dir.join("workspace");
    let log = peers.dir.join("run.jsonl");
    let config = write_config(peers, kind, runtime)?;
    println!("$ cat {}", config.display());
    print!("{}", std::fs::read_to_string(&config)?);
    let install = run_command(agentguard, &config, "install")?;
    let installed = workspace.join(".deps/agprobe/__init__.py").exists();
    println!(
        "(installed into the workspace through the proxy: {})",
        if installed { "yes" } else { "no" }
    );
    let refused = run_command(agentguard, &config, "elsewhere")?;
    println!(
        "\n$ agentguard audit show {} --kind egress_connect",
        log.display()
    );
    let show = std::process::Command::new(agentguard)
        .args(["audit", "show"])
        .arg(&log)
        .args(["--kind", "egress_connect"])
        .output()?;
    print!("{}", String::from_utf8_lossy(&show.stdout));
    let verify = std::process::Command::new(agentguard)
        .args(["audit", "verify"])
        .arg(&log)
        .output()?;
    print!("{}", String::from_utf8_lossy(&verify.stdout));
    if !install.status.success()
        || !installed
        || refused.status.success()
        || !verify.status.success()
    {
        bail!("the egress network demo did not behave as documented");
    }
    crate::demo_learn::run(agentguard, &config, &log)
}

/// The demo's config and workspace (read-write, so owned by nobody: it runs as its owner).
fn write_config(peers: &Peers, kind: EngineKind, runtime: Option<&str>) -> Result<PathBuf> {
    let Peers {
        dir,
        port,
        ns,
        ca_path,
    } = peers;
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace)?;
    std::fs::copy(ca_path, workspace.join("ca.pem"))?;
    chown(&workspace, Some(65534), Some(65534))?;
    let config = dir.join("agentguard.toml");
    let runtime_line = runtime
        .map(|r| format!("runtime = \"{r}\"\n"))
        .unwrap_or_default();
    std::fs::write(
        &config,
        format!(
            r#"image = "{image}"
engine = "{engine}"
{runtime_line}workspace = "workspace"
workspace_mode = "rw"
network = "egress"
timeout = 180

[egress]
allow = ["pkgs.example.test"]
allow_ports = [{port}]
allow_cidrs = ["127.0.0.2/32"]
nameservers = ["{ns}"]

[commands.install]
argv = ["python3", "-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check", "--target", "/workspace/.deps", "--index-url", "https://pkgs.example.test:{port}/simple/", "--cert", "/workspace/ca.pem", "agprobe"]
description = "Install the test package into /workspace/.deps"

[commands.elsewhere]
argv = ["python3", "-c", "import ssl, urllib.request; c = ssl.create_default_context(cafile='/workspace/ca.pem'); print(len(urllib.request.urlopen('https://files.example.test:{port}/files/agprobe-1.0-py3-none-any.whl', context=c, timeout=20).read()), 'bytes')"]
description = "Download a file from a host the allowlist does not name (yet)"

[audit]
path = "run.jsonl"
"#,
            image = image::PYTEST_IMAGE,
            engine = kind.program_name(),
        ),
    )?;
    Ok(config)
}

/// `agentguard run --config CONFIG NAME --json`, shown with its exit status and egress counts.
pub(crate) fn run_command(
    agentguard: &Path,
    config: &Path,
    name: &str,
) -> Result<std::process::Output> {
    let args = ["run", "--config", &config.to_string_lossy(), name, "--json"];
    println!("$ agentguard {}", args.join(" "));
    let out = std::process::Command::new(agentguard).args(args).output()?;
    let value: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    println!(
        "exit {}; egress {}; stderr: {}",
        out.status.code().map_or("none".into(), |c| c.to_string()),
        value["egress"],
        value["stderr"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .last()
            .unwrap_or_default()
    );
    Ok(out)
}

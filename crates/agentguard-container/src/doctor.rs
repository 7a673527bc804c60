//! `agentguard doctor`: what the engines on this machine can and cannot enforce.
//!
//! Each finding says what was checked, what was seen, and, for a problem, what to do. The
//! checks are cheap engine queries (`info`, file reads); nothing is started except the
//! optional trivial hardened run of a local image.

use std::path::Path;

use crate::engine::{Engine, on_path};
use crate::kind::EngineKind;
use crate::process::run_quiet;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Works.
    Ok,
    /// Works, with a caveat worth knowing.
    Warn,
    /// Does not work, or a limit would silently not apply.
    Fail,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How serious.
    pub level: Level,
    /// What was checked and what was seen.
    pub what: String,
    /// What to do (empty when nothing is needed).
    pub fix: String,
}

pub(crate) fn finding(level: Level, what: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding {
        level,
        what: what.into(),
        fix: fix.into(),
    }
}

async fn query(engine: &Engine, global: &[String], args: &[&str]) -> Option<String> {
    let out = run_quiet(&engine.command(global, args)).await.ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Runs every check.
pub async fn diagnose() -> Vec<Finding> {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let mut findings = cgroups(v2);
    for kind in [EngineKind::Docker, EngineKind::Podman] {
        findings.extend(engine(kind, v2).await);
    }
    findings.extend(oci());
    findings
}

/// `engine = "oci"`: the runtimes it can call, and its image cache.
fn oci() -> Vec<Finding> {
    let mut findings = Vec::new();
    for (runtime, package) in [("runc", "runc"), ("runsc", "runsc")] {
        findings.push(if on_path(runtime) {
            finding(Level::Ok, format!("oci: {runtime} found"), "")
        } else {
            finding(
                Level::Warn,
                format!("oci: {runtime} not found; engine = \"oci\" with runtime = \"{runtime}\" will be refused"),
                format!("apt-get install {package}"),
            )
        });
    }
    let root = crate::oci::cache_root();
    if root.exists() {
        findings.push(match crate::oci::cache::open(&root) {
            Ok(images) => {
                let entries = std::fs::read_dir(&images)
                    .map(|d| {
                        d.filter_map(|e| e.ok())
                            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                            .count()
                    })
                    .unwrap_or(0);
                finding(
                    Level::Ok,
                    format!(
                        "oci: the image cache {} holds {entries} image(s)",
                        root.display()
                    ),
                    "",
                )
            }
            Err(why) => finding(
                Level::Fail,
                format!("oci: the image cache: {why}"),
                format!(
                    "fix its owner and mode (0700), or set {}",
                    crate::oci::CACHE_VARIABLE
                ),
            ),
        });
    }
    findings
}

fn cgroups(v2: bool) -> Vec<Finding> {
    let mut findings = vec![finding(
        Level::Ok,
        format!(
            "cgroup version: {}",
            if v2 { "v2" } else { "v1 (or hybrid)" }
        ),
        "",
    )];
    if !v2 {
        for (controller, limit) in [("memory", "memory"), ("pids", "pids"), ("cpu", "cpus")] {
            if !Path::new(&format!("/sys/fs/cgroup/{controller}")).exists() {
                findings.push(finding(Level::Fail, format!("the {controller} cgroup controller is not mounted: the `{limit}` limit would not apply"), "enable the controller in the kernel command line or use a cgroup v2 host"));
            }
        }
    }
    findings
}

/// The findings for one engine: installed, answering, and what its `info` says.
async fn engine(kind: EngineKind, v2: bool) -> Vec<Finding> {
    let name = kind.program_name();
    if !on_path(name) {
        let package = match kind {
            EngineKind::Docker => "docker.io",
            EngineKind::Podman => "podman runc",
            EngineKind::Oci => "runc",
        };
        return vec![finding(
            Level::Warn,
            format!("{name}: not found on PATH"),
            format!("install it (Debian: apt-get install {package})"),
        )];
    }
    let engine = Engine::of_kind(kind);
    // Podman needs runc on cgroup v1 hybrid hosts, even for `info` (ENGINES.md).
    let (global, format): (Vec<String>, &str) = match kind {
        EngineKind::Docker => (
            Vec::new(),
            "{{json .Runtimes}}|{{json .SecurityOptions}}|{{.CgroupVersion}}|{{.SwapLimit}}|{{.MemoryLimit}}|{{.PidsLimit}}",
        ),
        EngineKind::Podman | EngineKind::Oci => (
            vec!["--runtime".into(), "runc".into()],
            "{{.Host.Security.Rootless}}|{{.Host.OCIRuntime.Name}}",
        ),
    };
    let Some(info) = query(&engine, &global, &["info", "--format", format]).await else {
        return vec![finding(
            Level::Fail,
            format!("{name}: found but not answering `{name} info`"),
            match kind {
                EngineKind::Docker => {
                    "start the daemon: `dockerd` (or `systemctl start docker`); `cargo xtask setup` does it on Debian"
                }
                EngineKind::Podman | EngineKind::Oci => {
                    "check `podman --runtime runc info`; on cgroup v1 hosts podman needs runc"
                }
            },
        )];
    };
    let mut findings = vec![finding(Level::Ok, format!("{name}: running"), "")];
    let fields: Vec<&str> = info.split('|').collect();
    match kind {
        EngineKind::Docker => findings.extend(docker(&fields)),
        EngineKind::Podman => findings.extend(podman(&fields, v2)),
        EngineKind::Oci => {}
    }
    findings
}

fn docker(fields: &[&str]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let runtimes = fields.first().copied().unwrap_or_default();
    if runtimes.contains("\"runsc\"") {
        let level = if runtimes.contains("--network=none") {
            Level::Ok
        } else {
            Level::Fail
        };
        findings.push(finding(level, "docker: runsc (gVisor) is registered", if level == Level::Ok { "" } else { "add \"runtimeArgs\": [\"--network=none\", \"--host-uds=open\"] to runsc in /etc/docker/daemon.json, or `--network none` runs fail" }));
        if !runtimes.contains("--host-uds=open") {
            findings.push(finding(Level::Warn, "docker: runsc is registered without --host-uds=open: network = \"egress\" runs under gVisor are refused (the sandbox cannot connect to the proxy's socket)", "add \"--host-uds=open\" to runsc's \"runtimeArgs\" in /etc/docker/daemon.json and reload dockerd (`cargo xtask setup` does both)"));
        }
    } else {
        findings.push(finding(Level::Warn, "docker: runsc (gVisor) is not registered; runtime = \"runsc\" will be refused", "install runsc and add {\"runtimes\":{\"runsc\":{\"path\":\"/usr/bin/runsc\",\"runtimeArgs\":[\"--network=none\",\"--host-uds=open\"]}}} to /etc/docker/daemon.json, then reload dockerd"));
    }
    if fields.get(1).is_some_and(|s| s.contains("rootless")) {
        findings.push(finding(
            Level::Warn,
            "docker: rootless mode: uids are mapped, so the rw-workspace owner rule does not hold",
            "use workspace_mode = \"ro\" or a rootful daemon",
        ));
    }
    for (index, limit) in [(3, "memory swap"), (4, "memory"), (5, "pids")] {
        if fields.get(index).copied() == Some("false") {
            findings.push(finding(Level::Fail, format!("docker: the {limit} limit is not supported by this daemon and would silently not apply"), "enable the cgroup controller (kernel command line) and restart dockerd"));
        }
    }
    findings
}

fn podman(fields: &[&str], v2: bool) -> Vec<Finding> {
    let mut findings = Vec::new();
    if fields.first().copied() == Some("true") {
        findings.push(match crate::rootless::unenforced_limits() {
            Some(why) => finding(
                Level::Fail,
                format!("podman: rootless, and the memory, cpus and pids limits would not apply: {why}; runs are refused"),
                crate::error::ROOTLESS_FIX,
            ),
            None => finding(
                Level::Ok,
                "podman: rootless with the limits delegated; rw workspaces run with --userns=keep-id",
                "",
            ),
        });
    }
    if !v2 {
        findings.push(finding(
            Level::Warn,
            "podman: on cgroup v1 hosts crun fails (\"cgroups in hybrid mode not supported\")",
            "set runtime = \"runc\" (or \"runsc\") in agentguard.toml",
        ));
    }
    findings.push(if on_path("runsc") {
        finding(Level::Ok, "podman: runsc found", "")
    } else {
        finding(
            Level::Warn,
            "podman: runsc not found; runtime = \"runsc\" will be refused",
            "apt-get install runsc",
        )
    });
    findings
}

/// A trivial hardened run (`true`, every default on) of the image, engine and runtime that
/// `spec` names: proves that this engine can actually apply the hardening to that image.
///
/// With `receipt` (the relay program on the host), the run takes the isolation receipt with
/// it as its init, as every real run does; `engine = "oci"` needs it.
pub async fn trial_run(spec: &crate::ContainerSpec, receipt: Option<&Path>) -> Finding {
    let mut builder = crate::ContainerSpec::builder(spec.image())
        .engine(spec.engine().clone())
        .command("doctor-true", ["true"])
        .timeout(std::time::Duration::from_secs(60));
    if let Some(runtime) = spec.runtime() {
        builder = builder.runtime(runtime.as_str());
    }
    let label = format!(
        "{} on {}{}",
        spec.image(),
        spec.engine().kind,
        spec.runtime()
            .map(|r| format!(" with {r}"))
            .unwrap_or_default()
    );
    let probe = match builder.build() {
        Ok(probe) => probe,
        Err(e) => {
            return finding(
                Level::Fail,
                format!("trivial hardened run of {label}: {e}"),
                "fix the config",
            );
        }
    };
    let mut executor = crate::ContainerExecutor::new(probe);
    if let Some(program) = receipt {
        executor = executor.with_receipt(program);
    }
    let outcome = match executor.invoke("doctor-true", &[]) {
        Ok(invocation) => executor.run(&invocation).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(result) if result.success() => finding(
            Level::Ok,
            format!(
                "a trivial hardened run of {label} succeeded in {} ms",
                result.duration.as_millis()
            ),
            "",
        ),
        Ok(result) => finding(
            Level::Fail,
            format!(
                "a trivial hardened run of {label} ended {} with exit code {:?}: {}",
                result.status.as_str(),
                result.exit_code,
                String::from_utf8_lossy(&result.stderr).trim()
            ),
            "the image needs a `true` program on its PATH for this check; otherwise see the message",
        ),
        Err(e) => {
            let message = e.to_string();
            let fix = match missing_helper(&message) {
                Some(hint) => hint.to_owned(),
                None => format!("see the message ({})", e.reason()),
            };
            finding(
                Level::Fail,
                format!("a trivial hardened run of {label} failed: {message}"),
                fix,
            )
        }
    }
}

/// The package to install when an engine says one of its helpers is missing: the init
/// process behind `--init` (podman's catatonit, docker's docker-init from tini) or an OCI
/// runtime program.
pub fn missing_helper(message: &str) -> Option<&'static str> {
    let lower = message.to_ascii_lowercase();
    let missing = ["not found", "no such file", "executable file not found"]
        .iter()
        .any(|m| lower.contains(m));
    if !missing {
        return None;
    }
    [
        (
            "catatonit",
            "install podman's init helper for --init: apt-get install catatonit",
        ),
        (
            "container-init",
            "install podman's init helper for --init: apt-get install catatonit",
        ),
        (
            "docker-init",
            "install docker's init helper for --init: apt-get install tini",
        ),
        (
            "runsc",
            "install gVisor's runsc: apt-get install runsc (then `cargo xtask setup` registers it)",
        ),
        ("\"runc\"", "install the runc runtime: apt-get install runc"),
        (
            "crun",
            "install the crun runtime, or set runtime = \"runc\": apt-get install crun",
        ),
    ]
    .into_iter()
    .find(|(needle, _)| lower.contains(needle))
    .map(|(_, hint)| hint)
}

#[cfg(test)]
mod tests {
    use super::missing_helper;

    #[test]
    fn a_missing_engine_helper_names_its_package() {
        for (message, package) in [
            (
                "Error: container-init binary not found on the host: stat /usr/libexec/podman/catatonit: no such file or directory",
                "apt-get install catatonit",
            ),
            (
                "docker: Error response from daemon: exec: \"docker-init\": executable file not found in $PATH",
                "apt-get install tini",
            ),
        ] {
            let hint = missing_helper(message).expect(message);
            assert!(hint.contains(package), "{message}: {hint}");
        }
        assert_eq!(missing_helper("image not known"), None);
        assert_eq!(
            missing_helper("catatonit crashed"),
            None,
            "present, not missing"
        );
    }
}

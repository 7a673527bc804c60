//! The bundle's `config.json` as a typed value (`oci-spec`): every default agentguard proves
//! for Docker and Podman, written out for a runtime that has no defaults of its own to add.
//!
//! Pure: `ContainerSpec + Invocation + RunIdentity + the image's environment -> Spec`, so the
//! hardening is golden-tested without a runtime. What Docker adds on its own (masked and
//! read-only `/proc` and `/sys` paths, a deny-all device cgroup, the default seccomp profile)
//! is written here explicitly; nothing is left to the runtime's defaults.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use agentguard_policy::Invocation;
use oci_spec::runtime::{
    Capabilities, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder,
    LinuxDeviceCgroupBuilder, LinuxMemoryBuilder, LinuxNamespaceBuilder, LinuxNamespaceType,
    LinuxPidsBuilder, LinuxResourcesBuilder, Mount, MountBuilder, PosixRlimitBuilder,
    PosixRlimitType, ProcessBuilder, RootBuilder, Spec, SpecBuilder, UserBuilder,
};

use crate::argv::{PROXY_SOCKET_TARGET, RELAY_TARGET, RunIdentity, WORKSPACE_TARGET};
use crate::error::{Error, Result};
use crate::spec::{ContainerSpec, WorkspaceMode, proxy_environment};

/// The paths Docker masks by default (an empty file or folder over each).
pub const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The paths Docker makes read-only by default.
pub const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The hostname inside every sandbox.
pub(crate) const HOSTNAME: &str = "agentguard";

/// The `PATH` a run gets when its image sets none (Docker's default).
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The CFS period the cpu quota is a share of (100 ms, as Docker's `--cpus`).
const CPU_PERIOD: u64 = 100_000;

/// What a run's bundle takes from its image and from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleInput<'a> {
    /// The unpacked root file system (absolute, read-only in the cache).
    pub rootfs: &'a Path,
    /// The image's own `Env` (`KEY=VALUE`), which Docker applies too.
    pub image_env: &'a [String],
    /// The cgroup path of the run.
    pub cgroup: String,
    /// The seccomp filter, already reduced to this machine (`seccomp.rs`).
    pub seccomp: oci_spec::runtime::LinuxSeccomp,
}

impl ContainerSpec {
    /// The `config.json` of a run of `invocation` (this spec is the command's effective one).
    ///
    /// The relay is PID 1 (it reaps, and takes the isolation receipt before the command), so a
    /// run without a relay or a receipt program is refused: there would be no init.
    pub fn oci_config(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
        input: &BundleInput<'_>,
    ) -> Result<Spec> {
        let argv = invocation.argv();
        let ids = self.user.to_string();
        // The runtime is given a seccomp filter: the receipt requires it in force, so a
        // runtime that skips it (one built without seccomp support does so silently) is refused.
        let mut args = vec![
            RELAY_TARGET.to_owned(),
            "--receipt".to_owned(),
            ids,
            "--seccomp".to_owned(),
        ];
        let mut env = environment(input.image_env, &self.environment);
        let mut mounts = base_mounts(self.tmpfs_size.bytes());
        match (&identity.relay, &identity.receipt) {
            (Some(relay), _) => {
                args.extend([relay.port.to_string(), PROXY_SOCKET_TARGET.to_owned()]);
                mounts.push(bind(&relay.program, RELAY_TARGET, true)?);
                mounts.push(bind(&relay.socket, PROXY_SOCKET_TARGET, true)?);
                let url = format!("http://127.0.0.1:{}", relay.port);
                for (key, value) in proxy_environment(&url, !relay.routes.is_empty()) {
                    env.insert(key.to_owned(), value);
                }
                for route in &relay.routes {
                    if let Some(variable) = &route.variable {
                        env.insert(variable.clone(), format!("{url}/{}", route.route));
                    }
                }
            }
            (None, Some(program)) => mounts.push(bind(program, RELAY_TARGET, true)?),
            (None, None) => {
                return Err(Error::Invalid {
                    field: "engine",
                    value: "oci".to_owned(),
                    reason: "engine = \"oci\" runs the relay as each sandbox's init: run through agentguard's Sandbox (or give the run a receipt program)".to_owned(),
                });
            }
        }
        args.push("--".to_owned());
        args.extend(argv.iter().cloned());
        self.workspace_mounts(&mut mounts, identity)?;
        let cwd = if self.workspace.is_some() {
            WORKSPACE_TARGET
        } else {
            "/"
        };
        let process = self.process(args, env, cwd)?;
        SpecBuilder::default()
            .version("1.0.2")
            .root(
                RootBuilder::default()
                    .path(input.rootfs)
                    .readonly(true)
                    .build()
                    .map_err(spec_error)?,
            )
            .hostname(HOSTNAME)
            .process(process)
            .mounts(mounts)
            .annotations(identity.labels.iter().cloned().collect::<HashMap<_, _>>())
            .linux(self.linux(input)?)
            .build()
            .map_err(spec_error)
    }

    /// The relay's process: the spec's user, no capabilities, no new privileges, the rlimits.
    fn process(
        &self,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: &str,
    ) -> Result<oci_spec::runtime::Process> {
        ProcessBuilder::default()
            .terminal(false)
            .user(
                UserBuilder::default()
                    .uid(self.user.uid)
                    .gid(self.user.gid)
                    .additional_gids(Vec::<u32>::new())
                    .build()
                    .map_err(spec_error)?,
            )
            .args(args)
            .env(
                env.into_iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>(),
            )
            .cwd(cwd)
            .capabilities(no_capabilities()?)
            .rlimits(vec![
                rlimit(PosixRlimitType::RlimitNofile, u64::from(self.nofile))?,
                rlimit(PosixRlimitType::RlimitCore, 0)?,
            ])
            .no_new_privileges(true)
            .oom_score_adj(1000)
            .build()
            .map_err(spec_error)
    }

    /// Namespaces, limits, masked paths and the seccomp filter.
    fn linux(&self, input: &BundleInput<'_>) -> Result<oci_spec::runtime::Linux> {
        let namespaces = [
            LinuxNamespaceType::Pid,
            LinuxNamespaceType::Network,
            LinuxNamespaceType::Ipc,
            LinuxNamespaceType::Uts,
            LinuxNamespaceType::Mount,
            LinuxNamespaceType::Cgroup,
        ]
        .into_iter()
        .map(|typ| LinuxNamespaceBuilder::default().typ(typ).build())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(spec_error)?;
        let memory = i64::try_from(self.memory.bytes()).unwrap_or(i64::MAX);
        let quota = i64::try_from(self.cpus.millicores() * (CPU_PERIOD / 1000)).unwrap_or(i64::MAX);
        let resources = LinuxResourcesBuilder::default()
            .devices(vec![
                LinuxDeviceCgroupBuilder::default()
                    .allow(false)
                    .access("rwm")
                    .build()
                    .map_err(spec_error)?,
            ])
            .memory(
                LinuxMemoryBuilder::default()
                    .limit(memory)
                    .swap(memory)
                    .build()
                    .map_err(spec_error)?,
            )
            .cpu(
                LinuxCpuBuilder::default()
                    .quota(quota)
                    .period(CPU_PERIOD)
                    .build()
                    .map_err(spec_error)?,
            )
            .pids(
                LinuxPidsBuilder::default()
                    .limit(i64::from(self.host_pids_limit()))
                    .build()
                    .map_err(spec_error)?,
            )
            .build()
            .map_err(spec_error)?;
        let strings = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        LinuxBuilder::default()
            .namespaces(namespaces)
            .resources(resources)
            .cgroups_path(PathBuf::from(&input.cgroup))
            .masked_paths(strings(MASKED_PATHS))
            .readonly_paths(strings(READONLY_PATHS))
            .seccomp(input.seccomp.clone())
            // The runtime spec's value (`rprivate` is runc's alone, and youki refuses it):
            // youki applies it recursively; runc makes `/` private and the root's parent
            // mount private itself, and binds the root anew, so no mount event propagates
            // between the host and the container's tree either way.
            .rootfs_propagation("private")
            .build()
            .map_err(spec_error)
    }

    /// The workspace (read-only unless `rw`), its writable folders, then the hidden paths
    /// covered by the run's empty file or folder, in that order.
    fn workspace_mounts(&self, mounts: &mut Vec<Mount>, identity: &RunIdentity) -> Result<()> {
        let Some(workspace) = &self.workspace else {
            return Ok(());
        };
        let readonly = self.workspace_mode == WorkspaceMode::ReadOnly;
        mounts.push(bind(workspace, WORKSPACE_TARGET, readonly)?);
        for entry in &self.writable {
            let target = format!("{WORKSPACE_TARGET}/{entry}");
            mounts.push(bind(&workspace.join(entry), &target, false)?);
        }
        if let Some(masks) = &identity.masks {
            for mask in &masks.paths {
                let source = if mask.dir { &masks.dir } else { &masks.file };
                let target = format!("{WORKSPACE_TARGET}/{}", mask.path);
                mounts.push(bind(source, &target, true)?);
            }
        }
        Ok(())
    }
}

/// The image's environment, then the config's (which wins), one value per key.
fn environment(image: &[String], config: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let (key, value) = DEFAULT_PATH.split_once('=').unwrap_or_default();
    env.insert(key.to_owned(), value.to_owned());
    env.insert("HOME".to_owned(), "/".to_owned());
    for pair in image {
        if let Some((key, value)) = pair.split_once('=')
            && !key.is_empty()
        {
            env.insert(key.to_owned(), value.to_owned());
        }
    }
    for (key, value) in config {
        env.insert(key.clone(), value.clone());
    }
    env
}

/// `/proc`, `/dev` (a small tmpfs with the runtime's default devices), `/dev/pts`,
/// `/dev/mqueue`, `/sys` and its cgroups read-only, and `/tmp` (noexec, `size` bytes). No
/// `/dev/shm`: Docker's `--ipc none` mounts none either.
fn base_mounts(tmp_bytes: u64) -> Vec<Mount> {
    let mount = |destination: &str, typ: &str, source: &str, options: &[&str]| {
        MountBuilder::default()
            .destination(destination)
            .typ(typ)
            .source(source)
            .options(options.iter().map(|o| (*o).to_owned()).collect::<Vec<_>>())
            .build()
            .unwrap_or_default()
    };
    let tmp = format!("size={tmp_bytes}");
    vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
            ],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
        mount(
            "/tmp",
            "tmpfs",
            "tmpfs",
            &["rw", "noexec", "nosuid", "nodev", &tmp, "mode=1777"],
        ),
    ]
}

/// A bind mount of a host path, private, read-only unless `readonly` is false.
fn bind(source: &Path, target: &str, readonly: bool) -> Result<Mount> {
    let mode = if readonly { "ro" } else { "rw" };
    MountBuilder::default()
        .destination(target)
        .typ("bind")
        .source(source)
        .options(
            ["rbind", "rprivate", mode, "nosuid", "nodev"]
                .iter()
                .map(|o| (*o).to_owned())
                .collect::<Vec<_>>(),
        )
        .build()
        .map_err(spec_error)
}

/// Every capability set empty.
fn no_capabilities() -> Result<oci_spec::runtime::LinuxCapabilities> {
    LinuxCapabilitiesBuilder::default()
        .bounding(Capabilities::new())
        .effective(Capabilities::new())
        .inheritable(Capabilities::new())
        .permitted(Capabilities::new())
        .ambient(Capabilities::new())
        .build()
        .map_err(spec_error)
}

fn rlimit(typ: PosixRlimitType, value: u64) -> Result<oci_spec::runtime::PosixRlimit> {
    PosixRlimitBuilder::default()
        .typ(typ)
        .hard(value)
        .soft(value)
        .build()
        .map_err(spec_error)
}

/// A value `oci-spec` refused to build (a field agentguard always sets was missing).
fn spec_error(error: impl std::fmt::Display) -> Error {
    Error::Invalid {
        field: "engine",
        value: "oci".to_owned(),
        reason: format!("the OCI runtime configuration could not be built: {error}"),
    }
}

#[cfg(test)]
mod tests;

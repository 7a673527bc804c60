//! Builds the docker/podman argv for a sandboxed command.
//!
//! Everything here is pure: `ContainerSpec + Invocation -> EngineCommand`. The hardening flags
//! are plain data, so they are golden-tested without an engine and shown by `--dry-run`, and
//! the e2e suite runs exactly this argv on real engines. The only way to get an argv is an
//! [`Invocation`]: an exact allowlisted NAME with its params' values checked and placed, one
//! argv element each; nothing else the caller passes reaches the command line.

use std::ffi::OsString;
use std::path::PathBuf;

use agentguard_policy::Invocation;

use crate::kind::EngineKind;
use crate::spec::{ContainerSpec, WorkspaceMode, proxy_environment};
use crate::values::Runtime;

/// Where the workspace appears inside the container (where a `path` param's value points).
pub const WORKSPACE_TARGET: &str = agentguard_policy::WORKSPACE;
/// Where the relay program appears inside a container whose way out is the egress proxy.
pub const RELAY_TARGET: &str = "/run/agentguard/relay";
/// Where the egress proxy's UNIX socket appears inside such a container.
pub const PROXY_SOCKET_TARGET: &str = "/run/agentguard/proxy.sock";

/// A program and its arguments, ready to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineCommand {
    /// The engine program.
    pub program: PathBuf,
    /// The arguments after the program.
    pub args: Vec<OsString>,
}

impl EngineCommand {
    /// The whole command line as text, one shell-safe word per argument, for `--dry-run` and
    /// error messages.
    pub fn display(&self) -> String {
        std::iter::once(self.program.as_os_str())
            .chain(self.args.iter().map(OsString::as_os_str))
            .map(|a| shell_word(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Per-run values that are not part of the spec: the container's unique name and labels, and
/// for a run whose only way out is the egress proxy, its relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunIdentity {
    /// The unique container name; a timeout or overflow kills the container by this name.
    pub name: String,
    /// Labels such as the owner pid and deadline, so stale containers can be swept.
    pub labels: Vec<(String, String)>,
    /// The relay and the proxy socket to mount, or `None` for no network at all.
    pub relay: Option<Relay>,
    /// What hidden workspace paths are masked with, and the paths found at the run's start
    /// (`None`: the run masks nothing; a spec with hidden patterns then refuses to run).
    pub masks: Option<Masks>,
    /// The ID of the image this run uses in place of the spec's reference, read from the
    /// engine just before the run (set by the executor; `None`: the reference, as `--dry-run`
    /// shows it).
    pub image_id: Option<String>,
    /// Who asked for this run, as its front end knows it (an MCP client's `name/version`):
    /// the `container_run` event's `invoker.client`.
    pub client: Option<String>,
    /// For a run without a relay: the relay program on the host, mounted to take the
    /// isolation receipt before the command (`None` with no relay either: no receipt, as for
    /// doctor's own runs). An egress run's relay takes it anyway.
    pub receipt: Option<PathBuf>,
}

impl RunIdentity {
    /// True when the run's entrypoint is the relay, which writes the isolation receipt as the
    /// first line of stderr before the command starts.
    pub fn takes_receipt(&self) -> bool {
        self.relay.is_some() || self.receipt.is_some()
    }
}

/// The masks of one run: an empty read-only file and an empty read-only folder on the host
/// (made by the caller in a folder of its own), and the workspace paths they cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Masks {
    /// An empty file, mounted over every hidden file (and symlink).
    pub file: PathBuf,
    /// An empty folder, mounted over every hidden folder.
    pub dir: PathBuf,
    /// The hidden paths, found when the run starts (`ContainerSpec::find_masks`).
    pub paths: Vec<crate::masks::Mask>,
}

/// The host side of a relay: the network stays `none`, the relay program and the proxy's
/// socket are bind-mounted read-only ([`RELAY_TARGET`], [`PROXY_SOCKET_TARGET`]), the relay
/// is the entrypoint (it listens on `127.0.0.1:port` inside and then execs the argv), and the
/// [`PROXY_VARIABLES`] point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// The relay program on the host (a static executable).
    pub program: PathBuf,
    /// The egress proxy's UNIX socket on the host.
    pub socket: PathBuf,
    /// The port the relay listens on inside the container.
    pub port: u16,
    /// The credential routes of the run: each variable gets its route's URL
    /// (`http://127.0.0.1:PORT/NAME`), and whenever there is a route, with a variable or not,
    /// `NO_PROXY` keeps clients off the proxy for them.
    pub routes: Vec<RouteVariable>,
}

/// A route of the run, and the variable that gets its URL in the container's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteVariable {
    /// The variable (`GH_API_URL`), if the route names one (`env`).
    pub variable: Option<String>,
    /// The route's name.
    pub route: String,
}

impl ContainerSpec {
    /// Global engine flags that come before any subcommand: Podman's runtime selection (and
    /// gVisor's network mode, which Podman must pass to runsc). Docker takes none.
    pub fn global_args(&self) -> Vec<String> {
        self.global_args_for(false)
    }

    /// The global flags of a run; with a relay, Podman must also tell runsc to let the sandbox
    /// connect to the mounted host socket (`host-uds=open`).
    fn global_args_for(&self, relay: bool) -> Vec<String> {
        match (&self.engine.kind, &self.runtime) {
            (EngineKind::Oci, runtime) => self
                .engine
                .oci_global_args(runtime.as_ref().is_some_and(Runtime::is_gvisor)),
            (EngineKind::Podman, Some(runtime)) => {
                let mut args = vec!["--runtime".to_owned(), runtime.to_string()];
                if runtime.is_gvisor() {
                    args.extend(["--runtime-flag".to_owned(), "network=none".to_owned()]);
                    if relay {
                        args.extend(["--runtime-flag".to_owned(), "host-uds=open".to_owned()]);
                    }
                }
                args
            }
            _ => Vec::new(),
        }
    }

    /// The host `--pids-limit` for this spec's `pids`.
    ///
    /// Under gVisor the host pids cgroup counts the sandbox's own threads, not the guest's
    /// processes: measured here, `--pids-limit 128` ends an ordinary shell script, and 512 runs
    /// 40 concurrent guest processes while 50 end the sandbox. So under runsc the host limit is
    /// four times `pids` (512 for the default 128); a fork bomb still only ends its own sandbox.
    pub fn host_pids_limit(&self) -> u32 {
        match &self.runtime {
            Some(runtime) if runtime.is_gvisor() => self.pids.saturating_mul(4),
            _ => self.pids,
        }
    }

    /// An engine command that is not `run` (`kill`, `rm`, `image inspect`), with the global flags.
    pub fn engine_command(&self, args: &[&str]) -> EngineCommand {
        self.engine.command(&self.global_args(), args)
    }

    /// The complete engine command for a checked invocation ([`ContainerSpec::invoke`]; its
    /// argv used as it is) with the command's own values; for `engine = "oci"` the runtime's
    /// command line (its bundle's `config.json` is [`ContainerSpec::oci_config`]).
    pub fn run_command(&self, invocation: &Invocation, identity: &RunIdentity) -> EngineCommand {
        let spec = self.for_command(invocation.command());
        if spec.engine.kind == EngineKind::Oci {
            let bundle = spec.engine.oci_bundle(&identity.name).display().to_string();
            return spec.engine_command(&["run", "--bundle", &bundle, &identity.name]);
        }
        spec.command_of(invocation, identity)
    }

    fn command_of(&self, invocation: &Invocation, identity: &RunIdentity) -> EngineCommand {
        let argv = invocation.argv();
        let podman = self.engine.kind == EngineKind::Podman;
        let mut args = Args(Vec::with_capacity(64));

        // Podman's runtime selection is a global flag and must come before `run`.
        args.0
            .extend(self.global_args_for(identity.relay.is_some()));
        // The relay, when it is the entrypoint, is the container's init (it reaps, and takes
        // the receipt without an exec of its own); otherwise the engine's init is.
        args.push(&["run", "--rm"]);
        if !identity.takes_receipt() {
            args.push(&["--init"]);
        }
        args.push(&["--name", &identity.name]);
        for (key, value) in &identity.labels {
            args.push(&["--label", &format!("{key}={value}")]);
        }
        // Never an engine network: a relay's way out is a mounted socket, not an interface.
        args.push(&["--pull", self.pull.as_str(), "--network", "none"]);
        if !podman && let Some(runtime) = &self.runtime {
            args.push(&["--runtime", runtime.as_str()]);
        }
        self.filesystem(&mut args, podman);
        self.limits(&mut args, podman);

        // Pitfalls from ENGINES.md: writable /dev/shm, logs on host disk, health checks that
        // run extra commands, restarts, image volumes, host proxy variables.
        args.push(&["--ipc", "none", "--log-driver", "none", "--restart", "no"]);
        args.push(&["--oom-score-adj", "1000", "--no-healthcheck"]);
        if podman {
            args.push(&["--image-volume", "ignore", "--http-proxy=false"]);
        }
        self.workspace_mount(&mut args, podman);
        self.path_mounts(&mut args, identity.masks.as_ref(), podman);

        // Only KEY=VALUE pairs from the spec: a bare `--env KEY` would copy the host's value.
        for (key, value) in &self.environment {
            args.push(&["--env", &format!("{key}={value}")]);
        }

        // The image's ENTRYPOINT could reinterpret the argv, so argv[0] (or the relay, which
        // execs it) replaces it. The image is named by the ID the executor read, when it did.
        let image = identity.image_id.as_deref().unwrap_or(&self.image);
        let ids = self.user.to_string();
        match (&identity.relay, &identity.receipt) {
            (None, None) => {
                args.push(&["--entrypoint", &argv[0], image]);
                args.0.extend(argv[1..].iter().cloned());
            }
            (None, Some(program)) => {
                self.mount_relay(&mut args, program, podman);
                args.push(&["--entrypoint", RELAY_TARGET, image]);
                args.push(&["--receipt", &ids, "--"]);
                args.0.extend(argv.iter().cloned());
            }
            (Some(relay), _) => {
                self.relay(&mut args, relay, podman);
                let port = relay.port.to_string();
                args.push(&["--entrypoint", RELAY_TARGET, image]);
                args.push(&["--receipt", &ids, &port, PROXY_SOCKET_TARGET, "--"]);
                args.0.extend(argv.iter().cloned());
            }
        }

        EngineCommand {
            program: self.engine.program.clone(),
            args: args.0.into_iter().map(OsString::from).collect(),
        }
    }

    /// Nothing outside the workspace and /tmp is writable; no capabilities, no privilege
    /// escalation, never root.
    fn filesystem(&self, args: &mut Args, podman: bool) {
        args.push(&["--read-only"]);
        let mut tmpfs = format!(
            "/tmp:rw,noexec,nosuid,nodev,size={},mode=1777",
            self.tmpfs_size
        );
        if podman {
            // Podman otherwise adds writable /run, /var/tmp and /dev/shm, and copies the
            // image's /tmp content into the tmpfs.
            args.push(&["--read-only-tmpfs=false"]);
            tmpfs.push_str(",notmpcopyup");
        }
        args.push(&["--tmpfs", &tmpfs]);
        args.push(&["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]);
        args.push(&["--user", &self.user.to_string()]);
        if podman && self.rootless && self.workspace_mode == WorkspaceMode::ReadWrite {
            // Rootless, any uid but the user's own is a subordinate id outside: map the
            // user's uid to itself so the rw workspace's files stay the user's.
            args.push(&["--userns=keep-id"]);
        }
    }

    /// Resource limits; swap equal to memory means no swap.
    fn limits(&self, args: &mut Args, podman: bool) {
        let memory = self.memory.to_string();
        args.push(&["--memory", &memory, "--memory-swap", &memory]);
        args.push(&[
            "--cpus",
            &self.cpus.to_string(),
            "--pids-limit",
            &self.host_pids_limit().to_string(),
        ]);
        args.push(&[
            "--ulimit",
            &format!("nofile={0}:{0}", self.nofile),
            "--ulimit",
            "core=0:0",
        ]);
        if podman {
            // Podman sets a default nproc above this machine's hard limit; it counts per uid
            // across the host, so --pids-limit stays the real per-container limit.
            args.push(&["--ulimit", &format!("nproc={0}:{0}", self.nproc)]);
        }
    }

    /// The relay's mounts (both read-only) and the proxy variables pointing at it.
    fn relay(&self, args: &mut Args, relay: &Relay, podman: bool) {
        self.mount_relay(args, &relay.program, podman);
        let readonly = if podman { ",ro=true" } else { ",readonly" };
        let source = relay.socket.to_string_lossy();
        args.push(&[
            "--mount",
            &format!("type=bind,source={source},target={PROXY_SOCKET_TARGET}{readonly}"),
        ]);
        let url = format!("http://127.0.0.1:{}", relay.port);
        for (key, value) in proxy_environment(&url, !relay.routes.is_empty()) {
            args.push(&["--env", &format!("{key}={value}")]);
        }
        for route in &relay.routes {
            if let Some(variable) = &route.variable {
                args.push(&["--env", &format!("{variable}={url}/{}", route.route)]);
            }
        }
    }

    /// The relay program, bind-mounted read-only at [`RELAY_TARGET`].
    fn mount_relay(&self, args: &mut Args, program: &std::path::Path, podman: bool) {
        let readonly = if podman { ",ro=true" } else { ",readonly" };
        let source = program.to_string_lossy();
        args.push(&[
            "--mount",
            &format!("type=bind,source={source},target={RELAY_TARGET}{readonly}"),
        ]);
    }

    /// The workspace bind mount, read-only unless `rw`, and the working folder.
    fn workspace_mount(&self, args: &mut Args, podman: bool) {
        let Some(path) = &self.workspace else {
            return;
        };
        let source = path.to_string_lossy();
        let readonly = match (self.workspace_mode, podman) {
            (WorkspaceMode::ReadWrite, _) => "",
            (WorkspaceMode::ReadOnly, true) => ",ro=true",
            (WorkspaceMode::ReadOnly, false) => ",readonly",
        };
        args.push(&[
            "--mount",
            &format!("type=bind,source={source},target={WORKSPACE_TARGET}{readonly}"),
            "--workdir",
            WORKSPACE_TARGET,
        ]);
    }
}

impl ContainerSpec {
    /// The writable folders, mounted read-write over the read-only workspace, then the hidden
    /// paths, each covered by the empty file or folder (read-only), over everything before.
    fn path_mounts(&self, args: &mut Args, masks: Option<&Masks>, podman: bool) {
        let Some(workspace) = &self.workspace else {
            return;
        };
        let readonly = if podman { ",ro=true" } else { ",readonly" };
        for entry in &self.writable {
            let source = workspace.join(entry);
            args.push(&[
                "--mount",
                &format!(
                    "type=bind,source={},target={WORKSPACE_TARGET}/{entry}",
                    source.to_string_lossy()
                ),
            ]);
        }
        let Some(masks) = masks else {
            return;
        };
        for mask in &masks.paths {
            let source = if mask.dir { &masks.dir } else { &masks.file };
            args.push(&[
                "--mount",
                &format!(
                    "type=bind,source={},target={WORKSPACE_TARGET}/{}{readonly}",
                    source.to_string_lossy(),
                    mask.path
                ),
            ]);
        }
    }
}

/// The engine arguments being built.
struct Args(Vec<String>);

impl Args {
    fn push(&mut self, items: &[&str]) {
        self.0.extend(items.iter().map(|s| (*s).to_owned()));
    }
}

//! [`Sandbox`]: the allowlisted commands of one spec, each with its network, and the run of
//! one of them with its own egress proxy when its network is `egress`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::AuditSink;
use agentguard_container::{
    ContainerExecutor, ContainerSpec, EngineCommand, Relay, RunError, RunIdentity, Streaming,
    check_mount_source,
};
use agentguard_egress::EgressProxy;
use agentguard_netpin::DnsResolver;
use agentguard_policy::{Arg, Invocation, IpNet, TargetPolicy};

use crate::count::RunSink;

use crate::error::{Error, Result, finish};
use crate::finished::Finished;
use crate::network::{DEFAULT_PROXY_PORT, Network};
use crate::relay::RelayProgram;
use crate::run_dir::{self, RELAY_FILE, RunDir, SOCKET_FILE};

/// The lowest `proxy_port`: the container's user (65534) may not bind below 1024.
const MIN_PROXY_PORT: u16 = 1024;

/// How one command reaches the network.
#[derive(Debug, Clone)]
enum Plan {
    None,
    /// The command's policy, and the host patterns it allows (for descriptions).
    Egress(TargetPolicy, Vec<String>),
}

/// The allowlisted commands of one spec, each with its network (see the crate docs).
pub struct Sandbox {
    executor: ContainerExecutor,
    plans: BTreeMap<String, Plan>,
    audit: Option<Arc<dyn AuditSink>>,
    nameservers: Vec<SocketAddr>,
    proxy_port: u16,
    relay: Option<RelayProgram>,
    runs_dir: PathBuf,
}

/// Per-command settings given to the builder.
#[derive(Debug, Default)]
struct CommandSettings {
    network: Option<Network>,
    egress_allow: Option<Vec<String>>,
}

/// Builder for [`Sandbox`].
pub struct SandboxBuilder {
    spec: ContainerSpec,
    audit: Option<Arc<dyn AuditSink>>,
    streaming: Streaming,
    drain_grace: Option<Duration>,
    network: Network,
    allow: Vec<String>,
    ports: Vec<u16>,
    cidrs: Vec<IpNet>,
    nameservers: Vec<SocketAddr>,
    proxy_port: u16,
    commands: BTreeMap<String, CommandSettings>,
    relay: Option<RelayProgram>,
    runs_dir: Option<PathBuf>,
}

impl Sandbox {
    /// A builder for the commands of `spec`: every command's network is `none` unless set.
    pub fn builder(spec: ContainerSpec) -> SandboxBuilder {
        SandboxBuilder {
            spec,
            audit: None,
            streaming: Streaming::Off,
            drain_grace: None,
            network: Network::None,
            allow: Vec::new(),
            ports: Vec::new(),
            cidrs: Vec::new(),
            nameservers: Vec::new(),
            proxy_port: DEFAULT_PROXY_PORT,
            commands: BTreeMap::new(),
            relay: None,
            runs_dir: None,
        }
    }
}

impl SandboxBuilder {
    /// Records every run, and every decision of an egress run's proxy, in `sink`.
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// Copies the command's output to this process's stdout and stderr as it arrives.
    pub fn streaming(mut self, streaming: Streaming) -> Self {
        self.streaming = streaming;
        self
    }

    /// See [`ContainerExecutor::with_drain_grace`].
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.drain_grace = Some(grace);
        self
    }

    /// The network of every command that does not set its own (default `none`).
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// An allowed host or pattern for egress commands (`[egress] allow`).
    pub fn egress_allow(mut self, pattern: impl Into<String>) -> Self {
        self.allow.push(pattern.into());
        self
    }

    /// An allowed port (`[egress] allow_ports`; default 443 only).
    pub fn egress_port(mut self, port: u16) -> Self {
        self.ports.push(port);
        self
    }

    /// A range treated as reachable although not public (`[egress] allow_cidrs`).
    pub fn egress_cidr(mut self, net: IpNet) -> Self {
        self.cidrs.push(net);
        self
    }

    /// A DNS server for the proxy (`[egress] nameservers`; default: the system resolver).
    pub fn nameserver(mut self, server: SocketAddr) -> Self {
        self.nameservers.push(server);
        self
    }

    /// The port the relay listens on inside the container (default 3128, at least 1024).
    pub fn proxy_port(mut self, port: u16) -> Self {
        self.proxy_port = port;
        self
    }

    /// The network of one command (`[commands.NAME] network`).
    pub fn command_network(mut self, name: &str, network: Network) -> Self {
        self.commands.entry(name.to_owned()).or_default().network = Some(network);
        self
    }

    /// The allowed hosts of one command, replacing `egress_allow` for it
    /// (`[commands.NAME] egress_allow`).
    pub fn command_egress_allow(mut self, name: &str, hosts: Vec<String>) -> Self {
        self.commands
            .entry(name.to_owned())
            .or_default()
            .egress_allow = Some(hosts);
        self
    }

    /// The relay program (default: the built-in one).
    pub fn relay(mut self, relay: RelayProgram) -> Self {
        self.relay = Some(relay);
        self
    }

    /// Where run folders are made (default [`run_dir::default_runs_dir`]).
    pub fn runs_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.runs_dir = Some(dir.into());
        self
    }

    /// Checks every command's network and allowlist, and returns the sandbox.
    pub fn build(self) -> Result<Sandbox> {
        let config = |message: String| Error::Config { message };
        for name in self.commands.keys() {
            if self.spec.commands().get(name).is_err() {
                return Err(config(format!(
                    "settings are given for command {name:?}, which is not an allowlisted command; add its argv or remove the settings"
                )));
            }
        }
        if self.proxy_port < MIN_PROXY_PORT {
            return Err(config(format!(
                "proxy_port {} is below {MIN_PROXY_PORT}: the container's user cannot listen there; choose a port from 1024 to 65535 (default {DEFAULT_PROXY_PORT})",
                self.proxy_port
            )));
        }
        let mut plans = BTreeMap::new();
        for name in self.spec.commands().names() {
            let settings = self.commands.get(name);
            let network = settings.and_then(|s| s.network).unwrap_or(self.network);
            let own_allow = settings.and_then(|s| s.egress_allow.as_ref());
            let plan = match network {
                Network::None if own_allow.is_some() => {
                    return Err(config(format!(
                        "command {name:?} sets egress_allow but its network is \"none\"; set network = \"egress\" for it, or remove egress_allow"
                    )));
                }
                Network::None => Plan::None,
                Network::Egress => {
                    let hosts = own_allow.unwrap_or(&self.allow).clone();
                    Plan::Egress(self.policy(name, own_allow)?, hosts)
                }
            };
            plans.insert(name.to_owned(), plan);
        }
        let runs_dir = self.runs_dir.unwrap_or_else(run_dir::default_runs_dir);
        check_mount_source("runs folder", &runs_dir).map_err(|e| config(e.to_string()))?;
        let mut executor = ContainerExecutor::new(self.spec).with_streaming(self.streaming);
        if let Some(sink) = &self.audit {
            executor = executor.with_audit(Arc::clone(sink));
        }
        if let Some(grace) = self.drain_grace {
            executor = executor.with_drain_grace(grace);
        }
        Ok(Sandbox {
            executor,
            plans,
            audit: self.audit,
            nameservers: self.nameservers,
            proxy_port: self.proxy_port,
            relay: self.relay,
            runs_dir,
        })
    }

    /// The policy of an egress command: its own hosts or the shared ones, never none.
    fn policy(&self, name: &str, own_allow: Option<&Vec<String>>) -> Result<TargetPolicy> {
        let hosts = own_allow.unwrap_or(&self.allow);
        if hosts.is_empty() {
            return Err(Error::Config {
                message: format!(
                    "command {name:?} has network = \"egress\" but no allowed host: set [egress] allow (or egress_allow for the command); an empty allowlist never means everything"
                ),
            });
        }
        let mut builder = TargetPolicy::builder();
        for host in hosts {
            builder = builder.allow(host);
        }
        for port in &self.ports {
            builder = builder.allow_port(*port);
        }
        for net in &self.cidrs {
            builder = builder.allow_cidr(*net);
        }
        builder.build().map_err(|source| Error::Policy {
            command: name.to_owned(),
            source,
        })
    }
}

impl Sandbox {
    /// The container executor (its spec, `kill_by_name`).
    pub fn executor(&self) -> &ContainerExecutor {
        &self.executor
    }

    /// A fresh identity for one run (see [`ContainerExecutor::identity`]).
    pub fn identity(&self) -> RunIdentity {
        self.executor.identity()
    }

    /// The network of the allowlisted command `name`, or `None` when it is not allowlisted.
    pub fn network_of(&self, name: &str) -> Option<Network> {
        self.plans.get(name).map(|plan| match plan {
            Plan::None => Network::None,
            Plan::Egress(..) => Network::Egress,
        })
    }

    /// The host patterns the egress command `name` may reach, or `None` when it is not an
    /// egress command.
    pub fn egress_hosts(&self, name: &str) -> Option<&[String]> {
        match self.plans.get(name) {
            Some(Plan::Egress(_, hosts)) => Some(hosts),
            _ => None,
        }
    }

    /// The folder run folders are made in.
    pub fn runs_dir(&self) -> &std::path::Path {
        &self.runs_dir
    }

    /// The allowlisted command `name` with `args` checked, once, for every run of it
    /// ([`ContainerExecutor::invoke`]: a refusal is recorded, nothing starts).
    pub fn invoke(&self, name: &str, args: &[(String, Arg)]) -> Result<Invocation> {
        self.executor.invoke(name, args).map_err(Error::Run)
    }

    /// The engine argv a run of `invocation` with `identity` would use, relay and mounts
    /// included (`--dry-run`); creates nothing.
    pub fn engine_command(&self, invocation: &Invocation, identity: &RunIdentity) -> EngineCommand {
        let mut identity = identity.clone();
        if let Some(Plan::Egress(..)) = self.plans.get(invocation.command()) {
            let dir = self.runs_dir.join(&identity.name);
            identity.relay = Some(self.relay_at(&dir.join(RELAY_FILE), &dir.join(SOCKET_FILE)));
        }
        self.executor.spec().run_command(invocation, &identity)
    }

    fn relay_at(&self, program: &std::path::Path, socket: &std::path::Path) -> Relay {
        Relay {
            program: program.to_owned(),
            socket: socket.to_owned(),
            port: self.proxy_port,
        }
    }

    /// Runs a checked invocation (see [`Sandbox::run_with`]).
    pub async fn run(&self, invocation: &Invocation) -> Result<Finished> {
        self.run_with(invocation, &self.identity()).await
    }

    /// Runs a checked invocation as the container `identity.name`; for an egress command,
    /// with its own proxy for exactly as long as the run. Dropping the future (on a signal)
    /// stops the proxy and removes the run folder; the caller then kills the container by
    /// name.
    pub async fn run_with(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
    ) -> Result<Finished> {
        let outcome = match self.plans.get(invocation.command()) {
            // No network: exactly the container run of today.
            None | Some(Plan::None) => self.executor.run_with(invocation, identity).await,
            Some(Plan::Egress(policy, _)) => {
                return self.run_egress(invocation, identity, policy).await;
            }
        };
        finish(outcome, None)
    }

    async fn run_egress(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
        policy: &TargetPolicy,
    ) -> Result<Finished> {
        let relay = match &self.relay {
            Some(relay) => relay.clone(),
            None => RelayProgram::embedded()?,
        };
        run_dir::prepare(&self.runs_dir)?;
        match run_dir::sweep(&self.runs_dir, false) {
            Ok(stale) if !stale.is_empty() => {
                tracing::info!(removed = stale.len(), "removed stale run folders")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweeping stale run folders failed"),
        }
        let dir = RunDir::create(&self.runs_dir, &identity.name)?;
        let program = relay.install(&dir.file(RELAY_FILE))?;
        let sink = Arc::new(RunSink::new(self.audit.clone(), &identity.name));
        let mut builder = EgressProxy::builder()
            .policy(policy.clone())
            .bind_unix(dir.file(SOCKET_FILE), identity.name.as_str())
            .audit(Arc::clone(&sink) as Arc<dyn AuditSink>);
        if !self.nameservers.is_empty() {
            let resolver = DnsResolver::with_nameservers(&self.nameservers)
                .map_err(|e| Error::Proxy(agentguard_egress::Error::Resolver(e)))?;
            builder = builder.resolver(Arc::new(resolver));
        }
        let proxy = builder.start().await.map_err(Error::Proxy)?;
        let identity = RunIdentity {
            relay: Some(self.relay_at(&program, &dir.file(SOCKET_FILE))),
            ..identity.clone()
        };
        let outcome = sink
            .flushing(self.executor.run_with(invocation, &identity))
            .await;
        // The container is gone: nothing can use the tunnels any more.
        let _ = proxy.shutdown(Duration::ZERO).await;
        drop(dir);
        let counts = sink.counts();
        if let Err(e) = sink.flush(true) {
            return Err(Error::Run(RunError::Audit(e)));
        }
        finish(outcome, Some(counts))
    }

    /// Kills the container `name` and removes it (see [`ContainerExecutor::kill_by_name`]).
    pub async fn kill_by_name(&self, name: &str) {
        self.executor.kill_by_name(name).await;
    }
}

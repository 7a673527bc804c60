//! [`Sandbox`]: the allowlisted commands of one spec, each with its network, and the run of
//! one of them with its own egress proxy when its network is `egress`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::AuditSink;
use agentguard_container::{
    ContainerExecutor, Masks, OutputMeter, Relay, RouteVariable, RunError, RunIdentity,
};
use agentguard_egress::{EgressProxy, Route};
use agentguard_netpin::DnsResolver;
use agentguard_policy::{Arg, Invocation, TargetPolicy};

use crate::count::RunSink;
use crate::error::{Error, Result, finish};
use crate::finished::Finished;
use crate::network::Network;
use crate::relay::RelayProgram;
use crate::run_dir::{self, RELAY_FILE, RunDir, SOCKET_FILE};

/// How one command reaches the network.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    None,
    Egress(EgressPlan),
}

/// The way out of one `network = "egress"` command.
#[derive(Debug, Clone)]
pub(crate) struct EgressPlan {
    /// What CONNECT may reach; `None` when the command has only routes.
    pub(crate) policy: Option<TargetPolicy>,
    /// The host patterns it allows (for descriptions).
    pub(crate) hosts: Vec<String>,
    /// The credential routes it was granted.
    pub(crate) routes: Vec<Granted>,
}

/// A credential route granted to a command, and the variable that gets its URL.
#[derive(Debug, Clone)]
pub(crate) struct Granted {
    pub(crate) route: Arc<Route>,
    pub(crate) env: Option<String>,
}

/// How a run is asked for, besides its invocation and identity.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions<'a> {
    /// Counts the output as it arrives (progress reports).
    pub meter: Option<&'a OutputMeter>,
    /// An observe run (`agentguard run --observe`): the run's proxy lets through, and records
    /// as `observed`, what the policy would refuse when every address is public. Only for
    /// `network = "egress"` commands; never from MCP.
    pub observe: bool,
}

/// The allowlisted commands of one spec, each with its network (see the crate docs).
pub struct Sandbox {
    pub(crate) executor: ContainerExecutor,
    pub(crate) plans: BTreeMap<String, Plan>,
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    pub(crate) nameservers: Vec<SocketAddr>,
    pub(crate) proxy_port: u16,
    pub(crate) relay: Option<RelayProgram>,
    pub(crate) runs_dir: PathBuf,
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
            Plan::Egress(_) => Network::Egress,
        })
    }

    /// The host patterns the egress command `name` may reach, or `None` when it is not an
    /// egress command.
    pub fn egress_hosts(&self, name: &str) -> Option<&[String]> {
        match self.plans.get(name) {
            Some(Plan::Egress(plan)) => Some(&plan.hosts),
            _ => None,
        }
    }

    /// The credential routes the command `name` was granted (none for other commands), each
    /// with the variable that holds its URL inside the container.
    pub fn routes_of(&self, name: &str) -> Vec<(&Route, Option<&str>)> {
        match self.plans.get(name) {
            Some(Plan::Egress(plan)) => plan
                .routes
                .iter()
                .map(|g| (g.route.as_ref(), g.env.as_deref()))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The port the relay listens on inside egress containers (routes are served there).
    pub fn proxy_port(&self) -> u16 {
        self.proxy_port
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

    /// The engine command line a run of `invocation` with `identity` would use, relay and
    /// mounts included, and for `engine = "oci"` the bundle's `config.json` after it
    /// (`--dry-run`); creates nothing.
    pub fn engine_command(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
    ) -> Result<Vec<String>> {
        let mut identity = identity.clone();
        let dir = self.runs_dir.join(&identity.name);
        match self.plans.get(invocation.command()) {
            Some(Plan::Egress(plan)) => {
                let (program, socket) = (dir.join(RELAY_FILE), dir.join(SOCKET_FILE));
                identity.relay = Some(self.relay_at(&program, &socket, plan));
            }
            // The relay that takes the isolation receipt, as a run would mount it.
            None | Some(Plan::None) => identity.receipt = Some(dir.join(RELAY_FILE)),
        }
        if self.masks(invocation) {
            let (file, dir) = run_dir::mask_sources(&dir);
            identity.masks = Some(Masks {
                file,
                dir,
                paths: Vec::new(),
            });
        }
        // The hidden paths as they are now: what a run started now would mask.
        let spec = self.executor.spec().for_command(invocation.command());
        let identity = spec
            .prepare_run(&identity)
            .map_err(|e| Error::Run(RunError::Paths(e)))?;
        let mut lines = vec![spec.run_command(invocation, &identity).display()];
        // engine = "oci": the hardening is the bundle's config.json, shown whole.
        if let Some(config) = spec.oci_dry_run(invocation, &identity) {
            lines.push(config.map_err(Error::Run)?);
        }
        Ok(lines)
    }

    fn relay_at(
        &self,
        program: &std::path::Path,
        socket: &std::path::Path,
        plan: &EgressPlan,
    ) -> Relay {
        let routes = plan
            .routes
            .iter()
            .map(|g| RouteVariable {
                variable: g.env.clone(),
                route: g.route.name().to_owned(),
            })
            .collect();
        Relay {
            program: program.to_owned(),
            socket: socket.to_owned(),
            port: self.proxy_port,
            routes,
        }
    }

    /// Refuses an observe run of `name` unless it is a `network = "egress"` command (a
    /// configuration mistake: there is nothing to observe). [`Sandbox::run`] checks it too; a
    /// caller checks first to say so before anything else.
    pub fn check_observe(&self, name: &str) -> Result<()> {
        match self.plans.get(name) {
            Some(Plan::Egress(_)) => Ok(()),
            _ => Err(Error::Config {
                message: format!(
                    "command {name:?} has network = \"none\": there is nothing to observe; --observe is for network = \"egress\" commands"
                ),
            }),
        }
    }

    /// The one entry every run takes (the CLI, MCP and Python): runs a checked invocation as
    /// the container `identity.name`, with `options` (a meter for progress, an observe run);
    /// for an egress command, with its own proxy for exactly as long as the run. Dropping the
    /// future (on a signal) stops the proxy and removes the run folder; the caller then kills
    /// the container by name.
    pub async fn run(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
        options: RunOptions<'_>,
    ) -> Result<Finished> {
        let meter = options.meter;
        if options.observe {
            self.check_observe(invocation.command())?;
        }
        // Refused before anything (a run folder, a proxy) is made for it; the executor
        // records the refusal.
        if self.executor.refuses_unenforced_limits() {
            let refused = self.executor.run_metered(invocation, identity, meter).await;
            return finish(refused, None, invocation);
        }
        let outcome = match self.plans.get(invocation.command()) {
            // No network: a folder of its own for the relay that takes the isolation receipt,
            // and the empty file and folder hidden paths need.
            None | Some(Plan::None) => {
                let dir = self.run_dir(identity)?;
                let program = self.relay_program()?.install(&dir.file(RELAY_FILE))?;
                let identity = RunIdentity {
                    receipt: Some(program),
                    masks: if self.masks(invocation) {
                        Some(dir.masks()?)
                    } else {
                        None
                    },
                    ..identity.clone()
                };
                let outcome = self
                    .executor
                    .run_metered(invocation, &identity, meter)
                    .await;
                drop(dir);
                outcome
            }
            Some(Plan::Egress(plan)) => {
                return self.run_egress(invocation, identity, plan, options).await;
            }
        };
        finish(outcome, None, invocation)
    }

    /// True when a run of `invocation` masks hidden paths.
    fn masks(&self, invocation: &Invocation) -> bool {
        let spec = self.executor.spec().for_command(invocation.command());
        spec.workspace().is_some() && !spec.hidden().is_empty()
    }

    /// The relay a run's container starts with: the one given, or the built-in one.
    fn relay_program(&self) -> Result<RelayProgram> {
        match &self.relay {
            Some(relay) => Ok(relay.clone()),
            None => RelayProgram::embedded(),
        }
    }

    /// The run's own folder in the checked runs folder (stale ones swept first).
    fn run_dir(&self, identity: &RunIdentity) -> Result<RunDir> {
        run_dir::prepare(&self.runs_dir)?;
        match run_dir::sweep(&self.runs_dir, false) {
            Ok(stale) if !stale.is_empty() => {
                tracing::info!(removed = stale.len(), "removed stale run folders")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweeping stale run folders failed"),
        }
        RunDir::create(&self.runs_dir, &identity.name)
    }

    async fn run_egress(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
        plan: &EgressPlan,
        options: RunOptions<'_>,
    ) -> Result<Finished> {
        let meter = options.meter;
        let dir = self.run_dir(identity)?;
        let program = self.relay_program()?.install(&dir.file(RELAY_FILE))?;
        let sink = Arc::new(RunSink::new(self.audit.clone(), &identity.name));
        let mut builder = EgressProxy::builder()
            .bind_unix(dir.file(SOCKET_FILE), identity.name.as_str())
            .route_port(self.proxy_port)
            .observe(options.observe)
            .audit(Arc::clone(&sink) as Arc<dyn AuditSink>);
        if let Some(policy) = &plan.policy {
            builder = builder.policy(policy.clone());
        }
        for granted in &plan.routes {
            builder = builder.route(Arc::clone(&granted.route));
        }
        if !self.nameservers.is_empty() {
            let resolver = DnsResolver::with_nameservers(&self.nameservers)
                .map_err(|e| Error::Proxy(agentguard_egress::Error::Resolver(e)))?;
            builder = builder.resolver(Arc::new(resolver));
        }
        let proxy = builder.start().await.map_err(Error::Proxy)?;
        let identity = RunIdentity {
            relay: Some(self.relay_at(&program, &dir.file(SOCKET_FILE), plan)),
            masks: if self.masks(invocation) {
                Some(dir.masks()?)
            } else {
                None
            },
            ..identity.clone()
        };
        let outcome = sink
            .flushing(self.executor.run_metered(invocation, &identity, meter))
            .await;
        // The container is gone: nothing can use the tunnels any more.
        let _ = proxy.shutdown(Duration::ZERO).await;
        drop(dir);
        let counts = sink.counts();
        if let Err(e) = sink.flush(true) {
            return Err(Error::Run(RunError::Audit(e)));
        }
        finish(outcome, Some(counts), invocation)
    }

    /// Kills the container `name` and removes it (see [`ContainerExecutor::kill_by_name`]).
    pub async fn kill_by_name(&self, name: &str) {
        self.executor.kill_by_name(name).await;
    }
}

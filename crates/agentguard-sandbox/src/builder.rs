//! [`SandboxBuilder`]: a spec's commands, each with its network and its typed
//! [`TargetPolicy`] (made once, where the configuration is read), checked into the
//! [`Sandbox`]'s plans. No host, port or range is parsed here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::AuditSink;
use agentguard_container::{ContainerExecutor, ContainerSpec, Streaming, check_mount_source};
use agentguard_egress::Route;
use agentguard_policy::TargetPolicy;

use crate::error::{Error, Result};
use crate::network::{DEFAULT_PROXY_PORT, Network};
use crate::relay::RelayProgram;
use crate::run_dir;
use crate::sandbox::{EgressPlan, Granted, Plan, Sandbox};

/// The lowest `proxy_port`: the container's user (65534) may not bind below 1024.
const MIN_PROXY_PORT: u16 = 1024;

/// Per-command settings given to the builder.
#[derive(Debug, Default)]
struct CommandSettings {
    network: Option<Network>,
    /// `Some(None)`: the command allows no host of its own (its routes only).
    policy: Option<Option<TargetPolicy>>,
    routes: Vec<String>,
}

/// Builder for [`Sandbox`].
pub struct SandboxBuilder {
    spec: ContainerSpec,
    audit: Option<Arc<dyn AuditSink>>,
    streaming: Streaming,
    drain_grace: Option<Duration>,
    network: Network,
    policy: Option<TargetPolicy>,
    nameservers: Vec<SocketAddr>,
    proxy_port: u16,
    commands: BTreeMap<String, CommandSettings>,
    routes: BTreeMap<String, Granted>,
    relay: Option<RelayProgram>,
    runs_dir: Option<PathBuf>,
    config_sha256: Option<String>,
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
            policy: None,
            nameservers: Vec::new(),
            proxy_port: DEFAULT_PROXY_PORT,
            commands: BTreeMap::new(),
            routes: BTreeMap::new(),
            relay: None,
            config_sha256: None,
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

    /// The SHA-256 of the config in force, for every `container_run` event
    /// ([`ContainerExecutor::with_config_sha256`]).
    pub fn config_sha256(mut self, digest: impl Into<String>) -> Self {
        self.config_sha256 = Some(digest.into());
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

    /// What egress commands may reach (`[egress]`: hosts, ports, reachable ranges), unless a
    /// command has its own.
    pub fn egress_policy(mut self, policy: TargetPolicy) -> Self {
        self.policy = Some(policy);
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

    /// What one command may reach, replacing `egress_policy` for it
    /// (`[commands.NAME] egress_allow`, with the shared ports and ranges); `None`: no host,
    /// only its routes (`egress_allow = []`).
    pub fn command_egress_policy(mut self, name: &str, policy: Option<TargetPolicy>) -> Self {
        self.commands.entry(name.to_owned()).or_default().policy = Some(policy);
        self
    }

    /// A credential route commands may be granted (`[routes.NAME]`), and the variable that
    /// gets its URL inside the container (`env`).
    pub fn route(mut self, route: Route, env: Option<String>) -> Self {
        let name = route.name().to_owned();
        let route = Arc::new(route);
        self.routes.insert(name, Granted { route, env });
        self
    }

    /// The routes of one command (`[commands.NAME] routes`); its network must be `egress`.
    pub fn command_routes(mut self, name: &str, routes: Vec<String>) -> Self {
        self.commands.entry(name.to_owned()).or_default().routes = routes;
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
            let own = settings.and_then(|s| s.policy.as_ref());
            let routes = self.granted(name, settings.map_or(&[][..], |s| &s.routes))?;
            let plan = match network {
                Network::None if own.is_some() || !routes.is_empty() => {
                    let key = if routes.is_empty() {
                        "egress_allow"
                    } else {
                        "routes"
                    };
                    return Err(config(format!(
                        "command {name:?} sets {key} but its network is \"none\"; set network = \"egress\" for it, or remove {key}"
                    )));
                }
                Network::None => Plan::None,
                Network::Egress => {
                    let policy = match own {
                        Some(own) => own.clone(),
                        None => self.policy.clone(),
                    };
                    if policy.is_none() && routes.is_empty() {
                        return Err(config(format!(
                            "command {name:?} has network = \"egress\" but no allowed host and no route: set [egress] allow (or egress_allow or routes for the command); an empty allowlist never means everything"
                        )));
                    }
                    // Routes only: CONNECT reaches nothing.
                    let hosts = policy.as_ref().map_or_else(Vec::new, |p| {
                        p.hosts.patterns().iter().map(ToString::to_string).collect()
                    });
                    Plan::Egress(EgressPlan {
                        policy,
                        hosts,
                        routes,
                    })
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
        if let Some(digest) = self.config_sha256 {
            executor = executor.with_config_sha256(digest);
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

    /// The routes granted to `name`, each defined.
    fn granted(&self, name: &str, routes: &[String]) -> Result<Vec<Granted>> {
        routes
            .iter()
            .map(|route| {
                self.routes.get(route).cloned().ok_or_else(|| Error::Config {
                    message: format!(
                        "command {name:?} is granted the route {route:?}, which is not defined; add a [routes.{route}] table or remove it from routes (defined: {})",
                        self.routes.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                })
            })
            .collect()
    }
}

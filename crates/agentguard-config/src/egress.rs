//! `network`, the `[egress]` table, and each command's network keys (`network`,
//! `egress_allow`, `routes`, from `commands.rs`). These become the [`Sandbox`] of a run;
//! values are checked by the sandbox crate, whose errors say what to write instead.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentguard_audit::AuditSink;
use agentguard_container::ContainerSpec;
use agentguard_netpin::DnsResolver;
use agentguard_policy::{IpNet, TargetPolicy, parse_cidr};
use agentguard_sandbox::relay::RelayProgram;
use agentguard_sandbox::{Network, Sandbox};
use anyhow::Context;
use serde::Deserialize;

use crate::commands::CommandEntry;
use crate::error::KeyError;
use crate::policy::{check_patterns, check_ports, policy_from};

/// Overrides the built-in relay with a relay program file.
pub const RELAY_ENV: &str = "AGENTGUARD_RELAY";
/// Overrides where run folders (each run's socket and relay copy) are made.
pub const RUN_DIR_ENV: &str = "AGENTGUARD_RUN_DIR";

/// The `[egress]` table.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressTable {
    #[serde(default)]
    allow: Vec<String>,
    /// Absent: 443. Present, it must name at least one port.
    allow_ports: Option<Vec<u16>>,
    #[serde(default)]
    allow_cidrs: Vec<String>,
    #[serde(default)]
    nameservers: Vec<String>,
    proxy_port: Option<u16>,
    /// A policy file bounding what this config may grant (relative to the config).
    floor: Option<PathBuf>,
}

/// The `[fetch]` table: the `fetch` tool of `agentguard mcp`, a DNS-pinned GET with the same
/// keys as `[egress]` (and `ca_file`, `max_bytes`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchTable {
    /// The allowed hosts or patterns.
    pub allow: Vec<String>,
    /// Absent: 443. Present, it must name at least one port.
    pub allow_ports: Option<Vec<u16>>,
    /// Ranges treated as reachable though not public.
    #[serde(default)]
    pub allow_cidrs: Vec<String>,
    /// DNS servers (`IP:PORT`) instead of the system resolver.
    #[serde(default)]
    pub nameservers: Vec<String>,
    /// Extra trusted roots (PEM), relative to the config file.
    pub ca_file: Option<PathBuf>,
    /// The largest body read.
    pub max_bytes: Option<u64>,
}

impl FetchTable {
    /// The policy of the fetch tool.
    pub fn policy(&self) -> anyhow::Result<TargetPolicy> {
        policy_from(
            &self.allow,
            self.allow_ports.as_deref().unwrap_or_default(),
            &self.allow_cidrs,
            ("[fetch] allow_cidrs", "[fetch] allow"),
        )
    }

    /// The nameservers, parsed.
    pub fn nameservers(&self) -> anyhow::Result<Vec<std::net::SocketAddr>> {
        self.nameservers
            .iter()
            .map(|s| DnsResolver::parse_nameserver(s).context("[fetch] nameservers"))
            .collect()
    }
}

/// What a run needs beyond the container spec: each command's network and allowlist, the
/// shared `[egress]` settings, and the descriptions shown to agents.
#[derive(Debug)]
pub struct Commands {
    network: Network,
    egress: EgressTable,
    /// `[egress] allow_cidrs` and `nameservers`, parsed once at load.
    cidrs: Vec<IpNet>,
    nameservers: Vec<SocketAddr>,
    /// `[egress]` as one typed policy (none without hosts), made once at load.
    policy: Option<TargetPolicy>,
    networks: BTreeMap<String, Network>,
    /// Each `[commands.NAME] egress_allow` with the shared ports and ranges (`None`: an
    /// empty list, the command's routes only), made once at load.
    policies: BTreeMap<String, Option<TargetPolicy>>,
    descriptions: BTreeMap<String, String>,
    /// `[secrets]` and `[routes]`, and the routes each command is granted.
    routes: super::Routes,
    command_routes: BTreeMap<String, Vec<String>>,
    /// The SHA-256 of the config these came from (`from_text`, `from_json`), for every
    /// `container_run` event.
    pub(crate) config_sha256: String,
}

impl Commands {
    /// Reads the network words and per-command settings; errors name the key.
    pub fn from_file(
        network: Option<&str>,
        commands: &BTreeMap<String, CommandEntry>,
        egress: Option<EgressTable>,
        routes: super::Routes,
    ) -> Result<Commands, KeyError> {
        let parse = |key: &str, value: &str| {
            Network::parse(value).map_err(|e| KeyError::new(key, e.to_string()))
        };
        let mut out = Commands {
            network: network.map_or(Ok(Network::None), |n| parse("network", n))?,
            egress: egress.unwrap_or_default(),
            cidrs: Vec::new(),
            nameservers: Vec::new(),
            policy: None,
            networks: BTreeMap::new(),
            policies: BTreeMap::new(),
            descriptions: BTreeMap::new(),
            routes,
            command_routes: BTreeMap::new(),
            config_sha256: String::new(),
        };
        check_ports("[egress] allow_ports", out.egress.allow_ports.as_deref())?;
        check_patterns("[egress] allow", &out.egress.allow)?;
        for cidr in &out.egress.allow_cidrs {
            let net = parse_cidr(cidr)
                .map_err(|e| KeyError::new("[egress] allow_cidrs", e.to_string()))?;
            out.cidrs.push(net);
        }
        for server in &out.egress.nameservers {
            let addr = DnsResolver::parse_nameserver(server)
                .map_err(|e| KeyError::new("[egress] nameservers", e.to_string()))?;
            out.nameservers.push(addr);
        }
        out.policy = out.typed_policy("[egress] allow", &out.egress.allow)?;
        for (name, entry) in commands {
            let CommandEntry::Table(table) = entry else {
                continue;
            };
            if let Some(allow) = &table.egress_allow {
                check_patterns(&format!("commands.{name}.egress_allow"), allow)?;
                let key = format!("commands.{name}.egress_allow");
                let policy = out.typed_policy(&key, allow)?;
                out.policies.insert(name.clone(), policy);
            }
            if let Some(network) = &table.network {
                let key = format!("commands.{name}.network");
                out.networks.insert(name.clone(), parse(&key, network)?);
            }
            if let Some(description) = &table.description {
                out.descriptions.insert(name.clone(), description.clone());
            }
            if let Some(routes) = &table.routes {
                for route in routes {
                    if !out.routes.has(route) {
                        return Err(KeyError::new(
                            format!("commands.{name}.routes"),
                            format!(
                                "no route named {route:?}; define [routes.{route}] (defined: {})",
                                out.routes.names()
                            ),
                        ));
                    }
                }
                out.command_routes.insert(name.clone(), routes.clone());
            }
        }
        Ok(out)
    }

    /// `hosts` with the shared ports and ranges as one policy; `None` for no host.
    fn typed_policy(&self, key: &str, hosts: &[String]) -> Result<Option<TargetPolicy>, KeyError> {
        if hosts.is_empty() {
            return Ok(None);
        }
        let mut builder = TargetPolicy::builder();
        for host in hosts {
            builder = builder.allow(host);
        }
        for port in self.egress.allow_ports.iter().flatten() {
            builder = builder.allow_port(*port);
        }
        for net in &self.cidrs {
            builder = builder.allow_cidr(*net);
        }
        builder
            .build()
            .map(Some)
            .map_err(|e| KeyError::new(key, e.to_string()))
    }

    /// The typed policy of egress command `name` (its own, or the shared one).
    pub fn policy_of(&self, name: &str) -> Option<&TargetPolicy> {
        match self.policies.get(name) {
            Some(own) => own.as_ref(),
            None => self.policy.as_ref(),
        }
    }

    /// `[egress] allow` as one typed policy (none without hosts).
    pub fn shared_policy(&self) -> Option<&TargetPolicy> {
        self.policy.as_ref()
    }

    /// The network of command `name` (its own, or the top-level one).
    pub fn network_of(&self, name: &str) -> Network {
        self.networks.get(name).copied().unwrap_or(self.network)
    }

    /// True when command `name` has its own `egress_allow` (which replaces `[egress] allow`).
    pub fn has_own_allow(&self, name: &str) -> bool {
        self.policies.contains_key(name)
    }

    /// `[egress] allow_ports` as written (absent: the default, 443).
    pub fn allow_ports(&self) -> Option<&[u16]> {
        self.egress.allow_ports.as_deref()
    }

    /// The routes command `name` is granted.
    pub fn routes_granted(&self, name: &str) -> &[String] {
        self.command_routes.get(name).map_or(&[], Vec::as_slice)
    }

    /// The network of `name` on Kubernetes: nothing, or its own proxy with its allowlist.
    pub fn k8s_network(&self, name: &str) -> anyhow::Result<agentguard_k8s::RunNetwork> {
        if self.network_of(name) == Network::None {
            return Ok(agentguard_k8s::RunNetwork::None);
        }
        let policy = self.policy_of(name);
        let hosts: Vec<String> = policy.map_or_else(Vec::new, |p| {
            p.hosts.patterns().iter().map(ToString::to_string).collect()
        });
        let granted = self.command_routes.get(name).map_or(&[][..], Vec::as_slice);
        let routes = self
            .routes
            .k8s_grants(granted)
            .map_err(super::ConfigError::Invalid)?;
        Ok(agentguard_k8s::RunNetwork::Egress(
            agentguard_k8s::EgressPlan {
                hosts,
                ports: self.egress.allow_ports.clone().unwrap_or_default(),
                cidrs: self.cidrs.clone(),
                proxy_port: self
                    .egress
                    .proxy_port
                    .unwrap_or(agentguard_sandbox::DEFAULT_PROXY_PORT),
                proxy_address: None,
                routes,
            },
        ))
    }

    /// The SHA-256 of the config file's bytes (of the canonical JSON for `from_json`).
    pub fn config_sha256(&self) -> &str {
        &self.config_sha256
    }

    /// `[egress] floor`, resolved against the config's folder.
    pub(crate) fn floor(&self) -> Option<&Path> {
        self.egress.floor.as_deref()
    }

    /// Every egress policy the config holds: the shared one and each command's own.
    pub(crate) fn all_policies(&self) -> impl Iterator<Item = &TargetPolicy> {
        self.policy.iter().chain(self.policies.values().flatten())
    }

    /// The `[secrets]` and `[routes]` of the config.
    pub fn routes(&self) -> &super::Routes {
        &self.routes
    }

    /// `[egress] nameservers`, parsed (empty: the system resolver).
    pub fn nameservers(&self) -> &[SocketAddr] {
        &self.nameservers
    }

    /// True when `[egress] nameservers` names any server.
    pub fn has_nameservers(&self) -> bool {
        !self.nameservers.is_empty()
    }

    /// The descriptions given in `[commands.NAME]` tables.
    pub fn descriptions(&self) -> &BTreeMap<String, String> {
        &self.descriptions
    }

    /// The sandbox that runs `spec`'s commands with these networks. `AGENTGUARD_RELAY` and
    /// `AGENTGUARD_RUN_DIR` override the relay and the runs folder.
    pub fn sandbox(
        &self,
        spec: ContainerSpec,
        audit: Option<Arc<dyn AuditSink>>,
        streaming: agentguard_container::Streaming,
    ) -> anyhow::Result<Sandbox> {
        let egress = &self.egress;
        let mut builder = Sandbox::builder(spec)
            .streaming(streaming)
            .network(self.network)
            .config_sha256(self.config_sha256.clone());
        if let Some(sink) = audit {
            builder = builder.audit(sink);
        }
        if let Some(policy) = &self.policy {
            builder = builder.egress_policy(policy.clone());
        }
        for server in &self.nameservers {
            builder = builder.nameserver(*server);
        }
        if let Some(port) = egress.proxy_port {
            builder = builder.proxy_port(port);
        }
        for (name, network) in &self.networks {
            builder = builder.command_network(name, *network);
        }
        for (name, policy) in &self.policies {
            builder = builder.command_egress_policy(name, policy.clone());
        }
        let wanted = self.command_routes.values().flatten().cloned().collect();
        for (route, env) in self
            .routes
            .build(&wanted)
            .map_err(super::ConfigError::Invalid)?
        {
            builder = builder.route(route, env);
        }
        for (name, routes) in &self.command_routes {
            builder = builder.command_routes(name, routes.clone());
        }
        if let Some(path) = std::env::var_os(RELAY_ENV).filter(|p| !p.is_empty()) {
            builder = builder.relay(RelayProgram::from_file(&PathBuf::from(path))?);
        }
        Ok(builder.runs_dir(runs_dir()).build()?)
    }
}

/// The `[secrets]`, `[routes]` and `[commands]` of `file`, checked, with `network` and
/// `[egress]`: what a sandbox is built from.
pub(crate) fn commands(
    file: &mut super::File,
    on_cluster: bool,
    resolve: impl Fn(&Path) -> PathBuf,
) -> Result<Commands, KeyError> {
    if let Some(egress) = file.egress.as_mut() {
        egress.floor = egress.floor.as_deref().map(&resolve);
    }
    let routes = super::Routes::from_file(
        std::mem::take(&mut file.secrets),
        std::mem::take(&mut file.routes),
        &file.environment,
        resolve,
    )?;
    routes.check_target(on_cluster)?;
    Commands::from_file(
        file.network.as_deref(),
        &file.commands,
        file.egress.take(),
        routes,
    )
}

/// Where run folders are made: `AGENTGUARD_RUN_DIR`, or the sandbox's default.
pub fn runs_dir() -> PathBuf {
    std::env::var_os(RUN_DIR_ENV)
        .filter(|p| !p.is_empty())
        .map_or_else(agentguard_sandbox::run_dir::default_runs_dir, PathBuf::from)
}

//! Configuring a proxy: the policy it enforces, where it listens, its limits, its audit sink.
//!
//! Everything is validated in [`EgressProxyBuilder::start`] before the socket is bound, and
//! each bad limit is named with what it must be.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{AuditSink, Event};
use agentguard_netpin::Resolve;
use agentguard_policy::TargetPolicy;

use crate::error::Result;
use crate::limits::Limits;
use crate::live::ProxyRules;
use crate::route::Route;
use crate::server::{Bind, EgressProxy};

/// Builder for [`EgressProxy`].
pub struct EgressProxyBuilder {
    policy: Option<TargetPolicy>,
    loaded: Option<Event>,
    tls_ports: Vec<u16>,
    bind: Bind,
    resolver: Option<Arc<dyn Resolve>>,
    limits: Limits,
    audit: Option<Arc<dyn AuditSink>>,
    budget: Option<crate::ConnectionBudget>,
    routes: Vec<Arc<Route>>,
    route_port: Option<u16>,
}

impl EgressProxy {
    /// A builder with the defaults: 127.0.0.1:3128, the system resolver, 10 s head and
    /// connect timeouts, 300 s idle and 5 s half-close timeouts, the connections the
    /// descriptor limit affords, 8 KiB heads, the TLS name check on port 443. The policy
    /// (hosts, ports, address rule) must be given.
    pub fn builder() -> EgressProxyBuilder {
        EgressProxyBuilder {
            policy: None,
            loaded: None,
            tls_ports: vec![443],
            bind: Bind::Tcp(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 3128)),
            resolver: None,
            limits: Limits::default(),
            audit: None,
            budget: None,
            routes: Vec::new(),
            route_port: None,
        }
    }
}

impl EgressProxyBuilder {
    /// The hosts, ports and address rule to enforce (required: there is no default
    /// allowlist, and an empty one never means "allow everything").
    pub fn policy(mut self, policy: TargetPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The address to listen on (default 127.0.0.1:3128; port 0 picks a free one).
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = Bind::Tcp(addr);
        self
    }

    /// Listens on a UNIX socket at `path` instead (created mode 0666; never replacing an
    /// existing file), with the same decisions, limits and audit; `client` names its clients
    /// in the audit log (for a container's proxy, the container's name).
    pub fn bind_unix(
        mut self,
        path: impl Into<std::path::PathBuf>,
        client: impl Into<String>,
    ) -> Self {
        self.bind = Bind::Unix {
            path: path.into(),
            client: client.into(),
        };
        self
    }

    /// The resolver (default: the system configuration).
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// How long a client may take to send its request head (default 10 s).
    pub fn head_timeout(mut self, timeout: Duration) -> Self {
        self.limits.head_timeout = timeout;
        self
    }

    /// How long the decision after the head may take, resolution and the dial across every
    /// checked address together (default 10 s); expiry answers 504.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.limits.connect_timeout = timeout;
        self
    }

    /// How long a tunnel may carry no byte in either direction (default 300 s).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle_timeout = timeout;
        self
    }

    /// How long a tunnel may stay open after one side finished sending while the other sends
    /// nothing (default 5 s).
    pub fn half_close_timeout(mut self, timeout: Duration) -> Self {
        self.limits.half_close_timeout = timeout;
        self
    }

    /// The most connections handled at once; a slot is held until the tunnel closes, and a
    /// connection over the cap is answered 503 at once. Default: what the descriptor limit
    /// affords (raised to the hard limit at start), six descriptors a tunnel and 64 spare.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.limits.max_connections = Some(max);
        self
    }

    /// Whether to check, on tunnels to the TLS ports, that the ClientHello asks for the
    /// CONNECT host (default: yes; DESIGN.md "TLS name check on tunnels").
    pub fn sni_check(mut self, check: bool) -> Self {
        self.limits.sni_check = check;
        self
    }

    /// An observe run (`agentguard run --observe`; default no): a CONNECT to a name or port
    /// the policy does not allow, and a route request with a method or path outside its
    /// route, is let through when every address the name resolves to is public (the
    /// classifier, `allow_cidrs`, pinning and the TLS name check unchanged), and recorded as
    /// an allow with reason `observed`. A name resolving to a non-public address, an IP
    /// literal, a route the run was not granted, and every malformed request stay refused.
    pub fn observe(mut self, observe: bool) -> Self {
        self.limits.observe = observe;
        self
    }

    /// The ports whose tunnels carry TLS and get the name check (default: 443 only).
    pub fn tls_ports(mut self, ports: impl IntoIterator<Item = u16>) -> Self {
        self.tls_ports = ports.into_iter().collect();
        self
    }

    /// The largest request head accepted (default 8 KiB); a larger one is answered 431.
    pub fn max_head_bytes(mut self, max: usize) -> Self {
        self.limits.max_head_bytes = max;
        self
    }

    /// The budget of connections to draw from instead of the process's
    /// ([`ConnectionBudget::process`](crate::ConnectionBudget::process)); ignored when
    /// `max_connections` is set.
    pub fn connection_budget(mut self, budget: crate::ConnectionBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// A credential route this proxy serves (DESIGN.md, "Credentials that never enter the
    /// sandbox"): any request other than CONNECT is a route request. With routes, the policy
    /// may be left out, and then CONNECT reaches nothing.
    pub fn route(mut self, route: Arc<Route>) -> Self {
        self.routes.push(route);
        self
    }

    /// The port clients reach the routes on, for absolute-form requests and rewritten
    /// `Location`s (default: the TCP port bound, or 3128 on a UNIX socket, the relay's).
    pub fn route_port(mut self, port: u16) -> Self {
        self.route_port = Some(port);
        self
    }

    /// How long a route's upstream may take to send its response head (default 60 s);
    /// expiry answers 504 `response_timeout`.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.limits.response_timeout = timeout;
        self
    }

    /// The event announcing the policy (`policy_loaded`, from a policy file), recorded with
    /// `generation` 1 before the proxy listens; the proxy does not start when it cannot be.
    pub fn loaded(mut self, event: Event) -> Self {
        self.loaded = Some(event);
        self
    }

    /// Where every decision and every tunnel close is recorded.
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// Validates the configuration, binds, and starts accepting connections.
    pub async fn start(self) -> Result<EgressProxy> {
        let limits = self.limits;
        limits.validate()?;
        // An explicit cap is this proxy's own; otherwise it shares the process's budget.
        let slots = match (limits.max_connections, self.budget) {
            (Some(n), _) => Arc::new(tokio::sync::Semaphore::new(n)),
            (None, Some(budget)) => budget.slots(),
            (None, None) => crate::limits::ConnectionBudget::process().slots(),
        };
        let rules = ProxyRules {
            policy: self.policy,
            routes: self.routes,
            resolver: self.resolver,
        }
        .into_rules(None)?;
        let route_port = match (self.route_port, &self.bind) {
            (Some(port), _) => port,
            (None, Bind::Tcp(addr)) => addr.port(),
            (None, Bind::Unix { .. }) => 3128,
        };
        crate::server::start(crate::server::Config {
            rules,
            loaded: self.loaded,
            route_port,
            limits,
            audit: self.audit,
            bind: self.bind,
            tls_ports: self.tls_ports,
            slots,
        })
        .await
    }
}

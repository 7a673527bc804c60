//! Configuring a proxy: the policy it enforces, where it listens, its limits, its audit sink.
//!
//! Everything is validated in [`EgressProxyBuilder::start`] before the socket is bound, and
//! each bad limit is named with what it must be.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::AuditSink;
use agentguard_netpin::{DEFAULT_MAX_ANSWERS, DnsResolver, Resolve};
use agentguard_policy::TargetPolicy;

use crate::error::{Error, Result};
use crate::server::EgressProxy;

/// The limits of one proxy, with their defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) head_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_head_bytes: usize,
    pub(crate) max_answers: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_connections: 1024,
            max_head_bytes: 8 * 1024,
            max_answers: DEFAULT_MAX_ANSWERS,
        }
    }
}

impl Limits {
    /// Names the first limit with an unusable value.
    fn validate(&self) -> Result<()> {
        let refuse = |field: &'static str, reason: &str| {
            Err(Error::Limit {
                field,
                reason: reason.into(),
            })
        };
        if self.max_connections == 0 {
            return refuse("max_connections", "must be at least 1");
        }
        if self.max_head_bytes < 64 {
            return refuse("max_head_bytes", "must be at least 64 bytes");
        }
        for (field, value) in [
            ("head_timeout", self.head_timeout),
            ("connect_timeout", self.connect_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if value.is_zero() {
                return refuse(field, "must be longer than zero");
            }
        }
        Ok(())
    }
}

/// Builder for [`EgressProxy`].
pub struct EgressProxyBuilder {
    policy: Option<TargetPolicy>,
    bind: SocketAddr,
    resolver: Option<Arc<dyn Resolve>>,
    limits: Limits,
    audit: Option<Arc<dyn AuditSink>>,
}

impl EgressProxy {
    /// A builder with the defaults: 127.0.0.1:3128, the system resolver, 10 s head and
    /// connect timeouts, 300 s idle timeout, 1024 connections, 8 KiB heads. The policy (hosts,
    /// ports, address rule) must be given.
    pub fn builder() -> EgressProxyBuilder {
        EgressProxyBuilder {
            policy: None,
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 3128),
            resolver: None,
            limits: Limits::default(),
            audit: None,
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
        self.bind = addr;
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

    /// How long one upstream dial may take (default 10 s); expiry answers 504.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.limits.connect_timeout = timeout;
        self
    }

    /// How long a tunnel may carry no byte in either direction (default 300 s).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle_timeout = timeout;
        self
    }

    /// The most connections handled at once (default 1024); a slot is held until the tunnel
    /// closes, and a connection over the cap is answered 503.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.limits.max_connections = max;
        self
    }

    /// The largest request head accepted (default 8 KiB); a larger one is answered 431.
    pub fn max_head_bytes(mut self, max: usize) -> Self {
        self.limits.max_head_bytes = max;
        self
    }

    /// Where every decision and every tunnel close is recorded.
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// Validates the configuration, binds, and starts accepting connections.
    pub async fn start(self) -> Result<EgressProxy> {
        let policy = self
            .policy
            .ok_or(agentguard_policy::Error::EmptyHostAllowlist)?;
        self.limits.validate()?;
        let resolver = match self.resolver {
            Some(r) => r,
            None => Arc::new(DnsResolver::system()?),
        };
        crate::server::start(crate::server::Config {
            policy,
            resolver,
            limits: self.limits,
            audit: self.audit,
            bind: self.bind,
        })
        .await
    }
}

//! The network target decision: port, then host allowlist, then addresses.
//!
//! The egress proxy and the DNS-pinned fetcher ask the same questions in the same order, so
//! the order lives here once: the port first, then the host pattern (a denied name costs zero
//! DNS queries), and only after resolution, every answer through the [`AddressPolicy`].

use crate::addr::AddressPolicy;
use crate::decision::{Denial, Reason};
use crate::error::Result;
use crate::host::{DomainName, Host, HostAllowlist};
use crate::port::PortSet;
use ipnet::IpNet;

/// Allowlisted hosts and ports plus the address rule for one network layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Which host names may be reached.
    pub hosts: HostAllowlist,
    /// Which ports may be reached.
    pub ports: PortSet,
    /// Which resolved addresses may be dialed.
    pub addresses: AddressPolicy,
}

/// Permission to resolve a name: the target passed the port and allowlist checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetPermit {
    /// The canonical name to resolve.
    pub name: DomainName,
    /// The allowlist pattern that matched, as written canonically.
    pub rule: String,
}

impl TargetPolicy {
    /// A builder: host patterns (at least one), ports (none means the default `{443}`), and
    /// allow/deny CIDR overrides of the address rule.
    pub fn builder() -> TargetPolicyBuilder {
        TargetPolicyBuilder::default()
    }

    /// Decides a target before any DNS query: port, then host.
    ///
    /// An IP literal is refused: as `non_public_address` (naming the range) when the address
    /// policy (with the operator's overrides) refuses it, otherwise as `ip_literal_not_allowed`,
    /// since patterns match names only.
    pub fn check_target(&self, host: &Host, port: u16) -> Result<TargetPermit, Denial> {
        self.ports.check(port)?;
        match host {
            Host::Ip(ip) => Err(match self.addresses.check(*ip) {
                Ok(_) => Denial::new(
                    Reason::IpLiteralNotAllowed,
                    format!(
                        "{ip} is an IP literal; only host names on the allowlist may be reached"
                    ),
                ),
                Err(denial) => Denial::new(
                    Reason::NonPublicAddress,
                    format!("the target is an IP literal, and {}", denial.message),
                ),
            }),
            Host::Domain(name) => {
                let rule = self.hosts.check(host)?;
                Ok(TargetPermit {
                    name: name.clone(),
                    rule: rule.to_string(),
                })
            }
        }
    }
}

/// Builder for [`TargetPolicy`]: the values an operator writes, validated by `build`.
#[derive(Debug, Clone, Default)]
pub struct TargetPolicyBuilder {
    hosts: Vec<String>,
    ports: Vec<u16>,
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

impl TargetPolicyBuilder {
    /// Allows a host pattern (`pkgs.example.com`, `*.example.com`, `*`). At least one is needed.
    pub fn allow(mut self, pattern: impl Into<String>) -> Self {
        self.hosts.push(pattern.into());
        self
    }

    /// Allows a destination port (default: 443 only).
    pub fn allow_port(mut self, port: u16) -> Self {
        self.ports.push(port);
        self
    }

    /// Marks a non-public range reachable (an internal mirror).
    pub fn allow_cidr(mut self, net: IpNet) -> Self {
        self.allow.push(net);
        self
    }

    /// Refuses a range even if public.
    pub fn deny_cidr(mut self, net: IpNet) -> Self {
        self.deny.push(net);
        self
    }

    /// Validates every pattern and port; an empty host list is refused.
    pub fn build(self) -> Result<TargetPolicy> {
        let hosts = HostAllowlist::new(&self.hosts)?;
        let ports = if self.ports.is_empty() {
            PortSet::default()
        } else {
            PortSet::new(self.ports)?
        };
        let addresses = self
            .allow
            .into_iter()
            .fold(AddressPolicy::new(), AddressPolicy::allow_cidr);
        let addresses = self
            .deny
            .into_iter()
            .fold(addresses, AddressPolicy::deny_cidr);
        Ok(TargetPolicy {
            hosts,
            ports,
            addresses,
        })
    }
}

//! The network target decision: port, then host allowlist, then addresses.
//!
//! The egress proxy and the DNS-pinned fetcher ask the same questions in the same order, so
//! the order lives here once: the port first, then the host pattern (a denied name costs zero
//! DNS queries), and only after resolution, every answer through the [`AddressPolicy`].

use std::net::IpAddr;

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
    /// The port to dial.
    pub port: u16,
    /// The allowlist pattern that matched, as written canonically.
    pub rule: String,
}

impl TargetPolicy {
    /// A policy with the default port set and the registry address rule.
    pub fn new(hosts: HostAllowlist) -> TargetPolicy {
        TargetPolicy {
            hosts,
            ports: PortSet::default(),
            addresses: AddressPolicy::new(),
        }
    }

    /// Builds a policy from the values an operator writes: host patterns (at least one), ports
    /// (empty means the default `{443}`), and allow/deny CIDR overrides.
    pub fn from_parts<S: AsRef<str>>(
        hosts: &[S],
        ports: &[u16],
        allow: &[IpNet],
        deny: &[IpNet],
    ) -> Result<TargetPolicy> {
        let hosts = HostAllowlist::new(hosts)?;
        let ports = if ports.is_empty() {
            PortSet::default()
        } else {
            PortSet::new(ports.iter().copied())?
        };
        let addresses = allow
            .iter()
            .fold(AddressPolicy::new(), |p, net| p.allow_cidr(*net));
        let addresses = deny.iter().fold(addresses, |p, net| p.deny_cidr(*net));
        Ok(TargetPolicy {
            hosts,
            ports,
            addresses,
        })
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
                    port,
                    rule: rule.to_string(),
                })
            }
        }
    }

    /// Decides the resolved addresses of a permitted name: all must pass.
    pub fn check_addresses(&self, ips: &[IpAddr]) -> Result<(), Denial> {
        self.addresses.check_all(ips)
    }
}

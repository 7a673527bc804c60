//! Which addresses count as public, and the operator's allow/deny overrides.
//!
//! Rust's `IpAddr::is_global` is unstable and its rule is not ours, so the rule is written
//! out here as tables taken from the IANA IPv4 and IPv6 Special-Purpose Address Registries
//! (DESIGN.md decision 2, tightened by the foundation issue):
//!
//! * IPv4: every block of the special-purpose registry is non-public, including the blocks it
//!   marks globally reachable (192.0.0.0/24 as a whole, AS112, AMT), plus multicast
//!   224.0.0.0/4 and reserved 240.0.0.0/4.
//! * IPv6: only 2000::/3 can be public; inside it the IETF protocol block 2001::/23,
//!   documentation (2001:db8::/32, 3fff::/20), 6to4 2002::/16, the old 6bone 3ffe::/16 and
//!   AS112 2620:4f:8000::/48 are not. IPv4-mapped addresses (::ffff:0:0/96) are classified by
//!   the IPv4 address inside; IPv4-compatible, NAT64, 6to4 and Teredo are always refused,
//!   because an address that carries another address is a way around this very check.
//!
//! Every non-public verdict names its range, so a refusal says *why*.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::decision::{Denial, Reason};
use crate::error::{Error, Result};
use crate::registry::{V4_TABLE, V6_TABLE};

/// A named block of address space that is not public.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialRange {
    /// The block.
    pub net: IpNet,
    /// Its name, lower case, as the registry names it (for example `loopback`).
    pub name: &'static str,
    /// The RFC that defines it.
    pub rfc: &'static str,
}

/// How an IPv6 address carried the IPv4 address it was classified by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// `::ffff:a.b.c.d`.
    Ipv4Mapped(Ipv4Addr),
}

/// The verdict of the classifier for one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Not in any special-purpose block.
    Public,
    /// In the named block.
    NonPublic {
        /// The most specific matching block.
        range: SpecialRange,
        /// Set when an IPv4-mapped IPv6 address was classified by its IPv4 address.
        via: Option<Embedding>,
    },
}

impl Class {
    /// True for [`Class::Public`].
    pub fn is_public(&self) -> bool {
        matches!(self, Class::Public)
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Class::Public => f.write_str("public"),
            Class::NonPublic { range, via: None } => write!(f, "{} ({})", range.name, range.net),
            Class::NonPublic {
                range,
                via: Some(Embedding::Ipv4Mapped(v4)),
            } => write!(f, "{} ({}, IPv4-mapped {v4})", range.name, range.net),
        }
    }
}

fn v4_range(ip: Ipv4Addr) -> Option<SpecialRange> {
    V4_TABLE
        .iter()
        .filter(|(net, len, _, _)| {
            prefix_match(u32::from(ip).into(), u32::from(*net).into(), *len, 32)
        })
        .max_by_key(|(_, len, _, _)| *len)
        .map(|&(net, len, name, rfc)| SpecialRange {
            net: IpNet::V4(Ipv4Net::new(net, len).expect("table prefix lengths are valid")),
            name,
            rfc,
        })
}

fn v6_range(ip: Ipv6Addr) -> Option<SpecialRange> {
    V6_TABLE
        .iter()
        .filter(|(net, len, _, _)| prefix_match(u128::from(ip), u128::from(*net), *len, 128))
        .max_by_key(|(_, len, _, _)| *len)
        .map(|&(net, len, name, rfc)| SpecialRange {
            net: IpNet::V6(Ipv6Net::new(net, len).expect("table prefix lengths are valid")),
            name,
            rfc,
        })
}

fn prefix_match(ip: u128, net: u128, len: u8, bits: u32) -> bool {
    let shift = bits - u32::from(len);
    ip.checked_shr(shift).unwrap_or(0) == net.checked_shr(shift).unwrap_or(0)
}

/// Classifies one address by the registry tables alone (no operator overrides).
pub fn classify(ip: IpAddr) -> Class {
    match ip {
        IpAddr::V4(v4) => match v4_range(v4) {
            Some(range) => Class::NonPublic { range, via: None },
            None => Class::Public,
        },
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return match v4_range(v4) {
                    Some(range) => Class::NonPublic {
                        range,
                        via: Some(Embedding::Ipv4Mapped(v4)),
                    },
                    None => Class::Public,
                };
            }
            match v6_range(v6) {
                Some(range) => Class::NonPublic { range, via: None },
                None => Class::Public,
            }
        }
    }
}

/// Why an address may be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrPermit {
    /// The address is public.
    Public,
    /// The address is non-public, but the operator allowed this block.
    AllowedCidr(IpNet),
}

/// The classifier plus the operator's overrides.
///
/// Order: a `deny_cidrs` match refuses; then an `allow_cidrs` match permits; then the registry
/// tables decide. IPv4-mapped addresses are matched against the overrides by the IPv4
/// address inside, so `::ffff:10.1.2.3` cannot slip past a `10.0.0.0/8` deny.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

impl AddressPolicy {
    /// The registry rule with no overrides.
    pub fn new() -> AddressPolicy {
        AddressPolicy::default()
    }

    /// Marks a block reachable even though it is not public (an internal mirror).
    pub fn allow_cidr(mut self, net: IpNet) -> AddressPolicy {
        self.allow.push(net.trunc());
        self
    }

    /// Refuses a block even though it is public.
    pub fn deny_cidr(mut self, net: IpNet) -> AddressPolicy {
        self.deny.push(net.trunc());
        self
    }

    /// The allowed override blocks.
    pub fn allowed_cidrs(&self) -> &[IpNet] {
        &self.allow
    }

    /// The denied override blocks.
    pub fn denied_cidrs(&self) -> &[IpNet] {
        &self.deny
    }

    /// Decides one address.
    ///
    /// The unspecified addresses (`0.0.0.0`, `::`, and `::ffff:0.0.0.0`) are refused whatever
    /// the allow CIDRs say: a connection to them reaches this host.
    pub fn check(&self, ip: IpAddr) -> std::result::Result<AddrPermit, Denial> {
        let canonical = ip.to_canonical();
        if canonical.is_unspecified() {
            return Err(Denial::new(
                Reason::NonPublicAddress,
                format!(
                    "address {ip} is the unspecified address, which reaches this host; it is never dialed, whatever the allow CIDRs say"
                ),
            ));
        }
        if let Some(net) = self.deny.iter().find(|n| n.contains(&canonical)) {
            return Err(Denial::new(
                Reason::NonPublicAddress,
                format!("address {ip} is in the operator's denied range {net}"),
            ));
        }
        if let Some(net) = self.allow.iter().find(|n| n.contains(&canonical)) {
            return Ok(AddrPermit::AllowedCidr(*net));
        }
        match classify(ip) {
            Class::Public => Ok(AddrPermit::Public),
            class => Err(Denial::new(
                Reason::NonPublicAddress,
                format!("address {ip} is not public: {class}"),
            )),
        }
    }

    /// Decides a whole answer set: every address must pass, and an empty set is refused.
    pub fn check_all(&self, ips: &[IpAddr]) -> std::result::Result<(), Denial> {
        if ips.is_empty() {
            return Err(Denial::new(
                Reason::NoAddresses,
                "the name has no addresses",
            ));
        }
        ips.iter().try_for_each(|ip| self.check(*ip).map(|_| ()))
    }
}

/// Parses a CIDR such as `10.0.0.0/8` or a bare address (taken as a single-address block).
pub fn parse_cidr(value: &str) -> Result<IpNet> {
    if let Ok(net) = value.parse::<IpNet>() {
        return Ok(net);
    }
    if let Ok(ip) = value.parse::<IpAddr>() {
        return Ok(IpNet::from(ip));
    }
    Err(Error::Cidr {
        value: value.to_owned(),
        reason: "expected ADDRESS/PREFIX such as 10.0.0.0/8 or fd00::/8, or a single address"
            .into(),
    })
}

/// Every block of the special-purpose registries (the classifier's tables), as networks: what
/// an address-level policy outside agentguard (a Kubernetes NetworkPolicy's `except`) should
/// exclude to agree with [`classify`]. Broader than the classifier where a registry entry has
/// globally reachable exceptions inside it, never narrower.
pub fn special_networks() -> Vec<IpNet> {
    let v4 = crate::registry::V4_TABLE
        .iter()
        .filter_map(|(ip, len, _, _)| ipnet::Ipv4Net::new(*ip, *len).ok().map(IpNet::V4));
    let v6 = crate::registry::V6_TABLE
        .iter()
        .filter_map(|(ip, len, _, _)| ipnet::Ipv6Net::new(*ip, *len).ok().map(IpNet::V6));
    let mut nets: Vec<IpNet> = v4.chain(v6).collect();
    nets.sort();
    nets.dedup();
    nets
}

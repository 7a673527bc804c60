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

/// IANA IPv4 Special-Purpose Address Registry, plus 224.0.0.0/4 (multicast registry).
const V4_TABLE: &[(Ipv4Addr, u8, &str, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "this network", "RFC 791"),
    (
        Ipv4Addr::new(0, 0, 0, 0),
        32,
        "this host on this network",
        "RFC 1122",
    ),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private-use", "RFC 1918"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "shared address space",
        "RFC 6598",
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback", "RFC 1122"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local", "RFC 3927"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private-use", "RFC 1918"),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        "ietf protocol assignments",
        "RFC 6890",
    ),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        29,
        "ipv4 service continuity prefix",
        "RFC 7335",
    ),
    (
        Ipv4Addr::new(192, 0, 0, 8),
        32,
        "ipv4 dummy address",
        "RFC 7600",
    ),
    (
        Ipv4Addr::new(192, 0, 0, 9),
        32,
        "port control protocol anycast",
        "RFC 7723",
    ),
    (
        Ipv4Addr::new(192, 0, 0, 10),
        32,
        "traversal using relays around nat anycast",
        "RFC 8155",
    ),
    (
        Ipv4Addr::new(192, 0, 0, 170),
        32,
        "nat64/dns64 discovery",
        "RFC 8880",
    ),
    (
        Ipv4Addr::new(192, 0, 0, 171),
        32,
        "nat64/dns64 discovery",
        "RFC 8880",
    ),
    (
        Ipv4Addr::new(192, 0, 2, 0),
        24,
        "documentation (test-net-1)",
        "RFC 5737",
    ),
    (Ipv4Addr::new(192, 31, 196, 0), 24, "as112-v4", "RFC 7535"),
    (Ipv4Addr::new(192, 52, 193, 0), 24, "amt", "RFC 7450"),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        "deprecated (6to4 relay anycast)",
        "RFC 7526",
    ),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private-use", "RFC 1918"),
    (
        Ipv4Addr::new(192, 175, 48, 0),
        24,
        "direct delegation as112 service",
        "RFC 7534",
    ),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking", "RFC 2544"),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        "documentation (test-net-2)",
        "RFC 5737",
    ),
    (
        Ipv4Addr::new(203, 0, 113, 0),
        24,
        "documentation (test-net-3)",
        "RFC 5737",
    ),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast", "RFC 5771"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved", "RFC 1112"),
    (
        Ipv4Addr::new(255, 255, 255, 255),
        32,
        "limited broadcast",
        "RFC 8190",
    ),
];

const fn v6(segments: [u16; 8]) -> Ipv6Addr {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Addr::new(a, b, c, d, e, f, g, h)
}

/// IANA IPv6 Special-Purpose Address Registry, plus the IANA IPv6 Address Space registry's
/// blocks outside 2000::/3 (so every address outside global unicast gets a name) and the
/// returned 6bone block 3ffe::/16.
const V6_TABLE: &[(Ipv6Addr, u8, &str, &str)] = &[
    // IPv6 Address Space registry: everything outside 2000::/3.
    (
        v6([0, 0, 0, 0, 0, 0, 0, 0]),
        8,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0x100, 0, 0, 0, 0, 0, 0, 0]),
        8,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0x200, 0, 0, 0, 0, 0, 0, 0]),
        7,
        "reserved by ietf",
        "RFC 4048",
    ),
    (
        v6([0x400, 0, 0, 0, 0, 0, 0, 0]),
        6,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0x800, 0, 0, 0, 0, 0, 0, 0]),
        5,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0x1000, 0, 0, 0, 0, 0, 0, 0]),
        4,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0x4000, 0, 0, 0, 0, 0, 0, 0]),
        3,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0x6000, 0, 0, 0, 0, 0, 0, 0]),
        3,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0x8000, 0, 0, 0, 0, 0, 0, 0]),
        3,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0xa000, 0, 0, 0, 0, 0, 0, 0]),
        3,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0xc000, 0, 0, 0, 0, 0, 0, 0]),
        3,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0xe000, 0, 0, 0, 0, 0, 0, 0]),
        4,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0xf000, 0, 0, 0, 0, 0, 0, 0]),
        5,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0xf800, 0, 0, 0, 0, 0, 0, 0]),
        6,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0]),
        7,
        "unique-local",
        "RFC 4193",
    ),
    (
        v6([0xfe00, 0, 0, 0, 0, 0, 0, 0]),
        9,
        "reserved by ietf",
        "RFC 4291",
    ),
    (
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0]),
        10,
        "link-local unicast",
        "RFC 4291",
    ),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0]),
        10,
        "site-local (deprecated)",
        "RFC 3879",
    ),
    (
        v6([0xff00, 0, 0, 0, 0, 0, 0, 0]),
        8,
        "multicast",
        "RFC 4291",
    ),
    // Special-Purpose Address Registry.
    (
        v6([0, 0, 0, 0, 0, 0, 0, 0]),
        128,
        "unspecified address",
        "RFC 4291",
    ),
    (
        v6([0, 0, 0, 0, 0, 0, 0, 1]),
        128,
        "loopback address",
        "RFC 4291",
    ),
    (
        v6([0, 0, 0, 0, 0, 0, 0, 0]),
        96,
        "ipv4-compatible (deprecated)",
        "RFC 4291",
    ),
    (
        v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0]),
        96,
        "ipv4-ipv6 translation (nat64)",
        "RFC 6052",
    ),
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0]),
        48,
        "ipv4-ipv6 translation, local-use (nat64)",
        "RFC 8215",
    ),
    (
        v6([0x100, 0, 0, 0, 0, 0, 0, 0]),
        64,
        "discard-only address block",
        "RFC 6666",
    ),
    (
        v6([0x100, 0, 0, 1, 0, 0, 0, 0]),
        64,
        "dummy ipv6 prefix",
        "RFC 9780",
    ),
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        23,
        "ietf protocol assignments",
        "RFC 2928",
    ),
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0]), 32, "teredo", "RFC 4380"),
    (
        v6([0x2001, 1, 0, 0, 0, 0, 0, 1]),
        128,
        "port control protocol anycast",
        "RFC 7723",
    ),
    (
        v6([0x2001, 1, 0, 0, 0, 0, 0, 2]),
        128,
        "traversal using relays around nat anycast",
        "RFC 8155",
    ),
    (
        v6([0x2001, 1, 0, 0, 0, 0, 0, 3]),
        128,
        "dns-sd service registration protocol anycast",
        "RFC 9665",
    ),
    (
        v6([0x2001, 2, 0, 0, 0, 0, 0, 0]),
        48,
        "benchmarking",
        "RFC 5180",
    ),
    (v6([0x2001, 3, 0, 0, 0, 0, 0, 0]), 32, "amt", "RFC 7450"),
    (
        v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0]),
        48,
        "as112-v6",
        "RFC 7535",
    ),
    (
        v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0]),
        28,
        "deprecated (previously orchid)",
        "RFC 4843",
    ),
    (
        v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0]),
        28,
        "orchidv2",
        "RFC 7343",
    ),
    (
        v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0]),
        28,
        "drone remote id protocol entity tags (dets)",
        "RFC 9374",
    ),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0]),
        32,
        "documentation",
        "RFC 3849",
    ),
    (v6([0x2002, 0, 0, 0, 0, 0, 0, 0]), 16, "6to4", "RFC 3056"),
    (
        v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0]),
        48,
        "direct delegation as112 service",
        "RFC 7534",
    ),
    (
        v6([0x3ffe, 0, 0, 0, 0, 0, 0, 0]),
        16,
        "6bone (returned)",
        "RFC 3701",
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0]),
        20,
        "documentation",
        "RFC 9637",
    ),
    (
        v6([0x5f00, 0, 0, 0, 0, 0, 0, 0]),
        16,
        "segment routing (srv6) sids",
        "RFC 9602",
    ),
];

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
    pub fn check(&self, ip: IpAddr) -> std::result::Result<AddrPermit, Denial> {
        let canonical = ip.to_canonical();
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

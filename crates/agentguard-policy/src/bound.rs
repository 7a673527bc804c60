//! Whether one egress policy stays within another (an operator's floor, or the policy it
//! replaces), decided exactly on the policies' own terms: host patterns, port sets, CIDR sets
//! and routes. No solver: each term is a set with a containment test of its own.
//!
//! A policy lets through `(name, port, address)` when the name matches a host pattern, the
//! port is in its ports, and the address is public or inside one of its `allow_cidrs`. So a
//! policy `N` stays within a bound `B` exactly when:
//!
//! - every host pattern of `N` is covered by one pattern of `B` (a finite set of patterns
//!   covers `*.x` only through `*` or `*.y` with `x` equal to or under `y`: any other union
//!   misses a name with a label none of them names), unless `N` allows no port;
//! - every port of `N` is one of `B`'s, unless `N` names no host;
//! - every non-public address inside `N`'s CIDRs is inside one of `B`'s (a union of ranges may
//!   cover a range no single one does, so ranges are compared as merged intervals);
//! - every route upstream of `N` is one of `B`'s, with no method `B` does not allow there.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::host::HostPattern;

/// What an egress policy grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// The host patterns (`allow`).
    pub hosts: Vec<HostPattern>,
    /// The ports (`allow_ports`; 443 when a file leaves it out).
    pub ports: BTreeSet<u16>,
    /// The ranges reachable though not public (`allow_cidrs`).
    pub cidrs: Vec<IpNet>,
    /// Each route's upstream, and the methods it allows there.
    pub routes: BTreeMap<String, BTreeSet<String>>,
}

/// One thing a policy grants that its bound does not.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Widening {
    /// A host pattern no pattern of the bound covers.
    Host(String),
    /// A port the bound does not allow.
    Port(u16),
    /// A range, or the part of one, whose non-public addresses the bound does not open.
    Cidr(IpNet),
    /// A route upstream the bound has no route to.
    Upstream(String),
    /// A method the bound's route to that upstream does not allow.
    Method {
        /// The route's upstream.
        upstream: String,
        /// The method.
        method: String,
    },
}

impl fmt::Display for Widening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Widening::Host(pattern) => write!(f, "allow \"{pattern}\""),
            Widening::Port(port) => write!(f, "allow_ports {port}"),
            Widening::Cidr(net) => write!(f, "allow_cidrs \"{net}\""),
            Widening::Upstream(upstream) => write!(f, "a route to {upstream}"),
            Widening::Method { upstream, method } => {
                write!(f, "method {method} on the route to {upstream}")
            }
        }
    }
}

/// True when every name `pattern` matches, `bound` matches too.
pub fn covers(bound: &HostPattern, pattern: &HostPattern) -> bool {
    match (bound, pattern) {
        (HostPattern::AnyName, _) => true,
        (_, HostPattern::AnyName) => false,
        (HostPattern::Exact(b), HostPattern::Exact(p)) => b == p,
        (HostPattern::Exact(_), HostPattern::Subdomains(_)) => false,
        (HostPattern::Subdomains(b), HostPattern::Exact(p)) => p.is_subdomain_of(b),
        (HostPattern::Subdomains(b), HostPattern::Subdomains(p)) => p == b || p.is_subdomain_of(b),
    }
}

impl Grant {
    /// Everything `self` grants that `bound` does not, in a stable order; empty when `self`
    /// stays within `bound`. `special` are the non-public ranges (the classifier's), outside
    /// which a CIDR grants nothing an address check would not.
    pub fn beyond(&self, bound: &Grant, special: &[IpNet]) -> Vec<Widening> {
        let mut out = BTreeSet::new();
        if !self.ports.is_empty() {
            for pattern in &self.hosts {
                if !bound.hosts.iter().any(|b| covers(b, pattern)) {
                    out.insert(Widening::Host(pattern.to_string()));
                }
            }
        }
        if !self.hosts.is_empty() {
            for port in self.ports.difference(&bound.ports) {
                out.insert(Widening::Port(*port));
            }
        }
        for net in &self.cidrs {
            let opened = intersect(&[*net], special);
            if !subtract(&opened, &bound.cidrs).is_empty() {
                out.insert(Widening::Cidr(*net));
            }
        }
        for (upstream, methods) in &self.routes {
            match bound.routes.get(upstream) {
                None => {
                    out.insert(Widening::Upstream(upstream.clone()));
                }
                Some(allowed) => {
                    for method in methods.difference(allowed) {
                        out.insert(Widening::Method {
                            upstream: upstream.clone(),
                            method: method.clone(),
                        });
                    }
                }
            }
        }
        out.into_iter().collect()
    }
}

/// An inclusive address interval of one family (IPv4 as `0..=u32::MAX` in the low bits).
type Interval = (bool, u128, u128);

fn interval(net: &IpNet) -> Interval {
    match (net.network(), net.broadcast()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            (false, u128::from(u32::from(a)), u128::from(u32::from(b)))
        }
        (a, b) => (true, bits(a), bits(b)),
    }
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The parts of `nets` inside `within`, as intervals.
fn intersect(nets: &[IpNet], within: &[IpNet]) -> Vec<Interval> {
    let mut out = Vec::new();
    for (v6, lo, hi) in nets.iter().map(interval) {
        for (w6, wlo, whi) in within.iter().map(interval) {
            if v6 == w6 && lo.max(wlo) <= hi.min(whi) {
                out.push((v6, lo.max(wlo), hi.min(whi)));
            }
        }
    }
    out
}

/// What of `intervals` no range of `nets` holds.
fn subtract(intervals: &[Interval], nets: &[IpNet]) -> Vec<Interval> {
    let mut left: Vec<Interval> = intervals.to_vec();
    for (n6, nlo, nhi) in nets.iter().map(interval) {
        let mut next = Vec::new();
        for (v6, lo, hi) in left {
            if v6 != n6 || hi < nlo || nhi < lo {
                next.push((v6, lo, hi));
                continue;
            }
            if lo < nlo {
                next.push((v6, lo, nlo - 1));
            }
            if nhi < hi {
                next.push((v6, nhi + 1, hi));
            }
        }
        left = next;
    }
    left
}

#[cfg(test)]
mod tests;

//! The containment decision against brute enumeration on small random policies: names of one
//! to three labels over `a`, `b`, `c` and a label no pattern names (`z`), three ports, every
//! address of 10.0.0.0/28, two route upstreams with two methods each.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use super::{Grant, Widening, covers};
use crate::host::{Host, HostPattern};
use ipnet::IpNet;

/// A small deterministic generator (xorshift), so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn names(labels: &[&str], depth: usize) -> Vec<String> {
    let mut all: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
    let mut last = all.clone();
    for _ in 1..depth {
        let mut next = Vec::new();
        for name in &last {
            for label in labels {
                next.push(format!("{label}.{name}"));
            }
        }
        all.extend(next.iter().cloned());
        last = next;
    }
    all
}

fn pattern(rng: &mut Rng) -> HostPattern {
    let bases = names(&["a", "b", "c"], 2);
    let base = &bases[rng.below(bases.len() as u64) as usize];
    match rng.below(9) {
        0 => HostPattern::AnyName,
        1..=4 => HostPattern::parse(base).unwrap(),
        _ => HostPattern::parse(&format!("*.{base}")).unwrap(),
    }
}

fn cidr(rng: &mut Rng) -> IpNet {
    let prefix = 28 + rng.below(5) as u8;
    let size = 1u32 << (32 - prefix);
    let start = (rng.below(16) as u32 / size) * size;
    IpNet::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + start)), prefix).unwrap()
}

fn grant(rng: &mut Rng) -> Grant {
    let mut g = Grant::default();
    for _ in 0..rng.below(4) {
        g.hosts.push(pattern(rng));
    }
    for port in [80u16, 443, 8080] {
        if rng.below(2) == 0 {
            g.ports.insert(port);
        }
    }
    for _ in 0..rng.below(3) {
        g.cidrs.push(cidr(rng));
    }
    for upstream in ["https://u1.test", "https://u2.test"] {
        if rng.below(2) == 0 {
            let methods: BTreeSet<String> = ["GET", "POST"]
                .iter()
                .filter(|_| rng.below(2) == 0)
                .map(|m| (*m).to_owned())
                .collect();
            g.routes.insert(upstream.to_owned(), methods);
        }
    }
    g
}

/// A part of `bound` (each entry kept or not), and now and then one random entry more: cases
/// near the boundary, within it or just beyond.
fn near(bound: &Grant, rng: &mut Rng) -> Grant {
    let mut g = Grant::default();
    for h in &bound.hosts {
        if rng.below(3) > 0 {
            g.hosts.push(h.clone());
        }
    }
    for p in &bound.ports {
        if rng.below(3) > 0 {
            g.ports.insert(*p);
        }
    }
    for c in &bound.cidrs {
        if rng.below(3) > 0 {
            g.cidrs.push(*c);
        }
    }
    for (upstream, methods) in &bound.routes {
        if rng.below(3) > 0 {
            let mut kept = BTreeSet::new();
            for m in methods {
                if rng.below(2) > 0 {
                    kept.insert(m.clone());
                }
            }
            g.routes.insert(upstream.clone(), kept);
        }
    }
    match rng.below(6) {
        0 => g.hosts.push(pattern(rng)),
        1 => g.cidrs.push(cidr(rng)),
        2 => {
            g.ports.insert(8080);
        }
        _ => {}
    }
    g
}

fn matches(patterns: &[HostPattern], name: &str) -> bool {
    let host = Host::parse(name).unwrap();
    patterns.iter().any(|p| p.matches(&host))
}

fn inside(nets: &[IpNet], ip: IpAddr) -> bool {
    nets.iter().any(|n| n.contains(&ip))
}

/// What brute enumeration says `new` grants beyond `bound`, per term.
fn brute(new: &Grant, bound: &Grant) -> Vec<Widening> {
    let universe = names(&["a", "b", "c", "z"], 3);
    let addresses: Vec<IpAddr> = (0..16u32)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
        .collect();
    let mut out = BTreeSet::new();
    if !new.ports.is_empty() {
        for p in &new.hosts {
            let host = |n: &String| Host::parse(n).unwrap();
            if universe
                .iter()
                .any(|n| p.matches(&host(n)) && !matches(&bound.hosts, n))
            {
                out.insert(Widening::Host(p.to_string()));
            }
        }
    }
    if !new.hosts.is_empty() {
        for port in &new.ports {
            if !bound.ports.contains(port) {
                out.insert(Widening::Port(*port));
            }
        }
    }
    for net in &new.cidrs {
        if addresses
            .iter()
            .any(|ip| net.contains(ip) && !inside(&bound.cidrs, *ip))
        {
            out.insert(Widening::Cidr(*net));
        }
    }
    for (upstream, methods) in &new.routes {
        match bound.routes.get(upstream) {
            None => {
                out.insert(Widening::Upstream(upstream.clone()));
            }
            Some(allowed) => {
                for m in methods.difference(allowed) {
                    out.insert(Widening::Method {
                        upstream: upstream.clone(),
                        method: m.clone(),
                    });
                }
            }
        }
    }
    out.into_iter().collect()
}

#[test]
fn the_decision_equals_brute_enumeration_on_random_policies() {
    let special: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut widened = 0;
    for seed in 0..4000 {
        let bound = grant(&mut rng);
        let new = match seed % 2 {
            0 => grant(&mut rng),
            _ => near(&bound, &mut rng),
        };
        let want = brute(&new, &bound);
        let got = new.beyond(&bound, &special);
        assert_eq!(got, want, "seed {seed}: new {new:?} bound {bound:?}");
        widened += usize::from(!got.is_empty());
        // A policy is always within itself.
        assert!(
            new.beyond(&new, &special).is_empty(),
            "seed {seed}: {new:?}"
        );
    }
    // Both answers occur often enough for the comparison to mean something.
    assert!((500..3500).contains(&widened), "{widened} of 4000 widened");
}

#[test]
fn a_wider_pattern_covers_a_narrower_one_and_never_the_reverse() {
    let p = |s: &str| HostPattern::parse(s).unwrap();
    assert!(covers(&p("*.example.com"), &p("api.example.com")));
    assert!(covers(&p("*.example.com"), &p("*.api.example.com")));
    assert!(covers(&p("*.example.com"), &p("*.example.com")));
    assert!(!covers(&p("*.example.com"), &p("example.com")));
    assert!(!covers(&p("api.example.com"), &p("*.example.com")));
    assert!(covers(&p("*"), &p("*.example.com")));
    assert!(!covers(&p("*.example.com"), &p("*")));
}

#[test]
fn a_union_of_ranges_covers_what_no_single_one_does_and_public_space_is_no_widening() {
    let special: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let net = |s: &str| -> IpNet { s.parse().unwrap() };
    let new = Grant {
        cidrs: vec![net("10.0.0.0/8"), net("203.0.113.0/24")],
        ..Grant::default()
    };
    let halves = Grant {
        cidrs: vec![net("10.0.0.0/9"), net("10.128.0.0/9")],
        ..Grant::default()
    };
    assert_eq!(new.beyond(&halves, &special), []);
    let one_half = Grant {
        cidrs: vec![net("10.0.0.0/9")],
        ..Grant::default()
    };
    assert_eq!(
        new.beyond(&one_half, &special),
        [Widening::Cidr(net("10.0.0.0/8"))]
    );
    assert_eq!(
        Widening::Cidr(net("10.0.0.0/8")).to_string(),
        "allow_cidrs \"10.0.0.0/8\""
    );
    let _ = BTreeMap::<String, BTreeSet<String>>::new();
}

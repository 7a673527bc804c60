//! The IANA special-purpose address registries, as data.
//!
//! These two tables are the classifier's whole knowledge of which blocks are not public
//! (DESIGN.md decision 2). They live apart from the matching code in `addr.rs` so that a
//! review of the rule is a review of this file, line by line against the registries, and the
//! tests check them against a second, independently written copy.

use std::net::{Ipv4Addr, Ipv6Addr};

/// IANA IPv4 Special-Purpose Address Registry, plus 224.0.0.0/4 (multicast registry).
pub(crate) const V4_TABLE: &[(Ipv4Addr, u8, &str, &str)] = &[
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
pub(crate) const V6_TABLE: &[(Ipv6Addr, u8, &str, &str)] = &[
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

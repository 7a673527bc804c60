//! Table-driven tests of every policy decision.
//!
//! The address tables below are written again from the IANA registries, independently of the
//! implementation's tables: for every block, its first and last address, and where the
//! neighbouring address outside the block is public, that neighbour too.

mod params;

use std::net::IpAddr;

use crate::*;

fn class_of(addr: &str) -> String {
    let ip: IpAddr = addr
        .parse()
        .unwrap_or_else(|e| panic!("bad test address {addr}: {e}"));
    match classify(ip) {
        Class::Public => "public".to_owned(),
        Class::NonPublic { range, .. } => range.name.to_owned(),
    }
}

fn check_table(cases: &[(&str, &str)]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(addr, want)| {
            let got = class_of(addr);
            (got != *want).then(|| format!("{addr}: want {want:?}, got {got:?}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "misclassified:\n{}",
        failures.join("\n")
    );
}

#[test]
fn ipv4_special_purpose_registry() {
    check_table(&[
        // 0.0.0.0/8 this network; 0.0.0.0/32 this host.
        ("0.0.0.0", "this host on this network"),
        ("0.0.0.1", "this network"),
        ("0.255.255.255", "this network"),
        ("1.0.0.0", "public"),
        // 10.0.0.0/8 private-use.
        ("9.255.255.255", "public"),
        ("10.0.0.0", "private-use"),
        ("10.255.255.255", "private-use"),
        ("11.0.0.0", "public"),
        // 100.64.0.0/10 shared address space.
        ("100.63.255.255", "public"),
        ("100.64.0.0", "shared address space"),
        ("100.127.255.255", "shared address space"),
        ("100.128.0.0", "public"),
        // 127.0.0.0/8 loopback.
        ("126.255.255.255", "public"),
        ("127.0.0.0", "loopback"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.255", "loopback"),
        ("128.0.0.0", "public"),
        // 169.254.0.0/16 link-local.
        ("169.253.255.255", "public"),
        ("169.254.0.0", "link-local"),
        ("169.254.169.254", "link-local"),
        ("169.254.255.255", "link-local"),
        ("169.255.0.0", "public"),
        // 172.16.0.0/12 private-use.
        ("172.15.255.255", "public"),
        ("172.16.0.0", "private-use"),
        ("172.31.255.255", "private-use"),
        ("172.32.0.0", "public"),
        // 192.0.0.0/24 as a whole, and its more specific entries.
        ("191.255.255.255", "public"),
        ("192.0.0.0", "ipv4 service continuity prefix"),
        ("192.0.0.7", "ipv4 service continuity prefix"),
        ("192.0.0.8", "ipv4 dummy address"),
        ("192.0.0.9", "port control protocol anycast"),
        ("192.0.0.10", "traversal using relays around nat anycast"),
        ("192.0.0.11", "ietf protocol assignments"),
        ("192.0.0.170", "nat64/dns64 discovery"),
        ("192.0.0.171", "nat64/dns64 discovery"),
        ("192.0.0.255", "ietf protocol assignments"),
        ("192.0.1.0", "public"),
        // 192.0.2.0/24 TEST-NET-1.
        ("192.0.2.0", "documentation (test-net-1)"),
        ("192.0.2.255", "documentation (test-net-1)"),
        ("192.0.3.0", "public"),
        // 192.31.196.0/24 AS112-v4 (globally reachable in the registry, denied here).
        ("192.31.195.255", "public"),
        ("192.31.196.0", "as112-v4"),
        ("192.31.196.255", "as112-v4"),
        ("192.31.197.0", "public"),
        // 192.52.193.0/24 AMT (globally reachable in the registry, denied here).
        ("192.52.193.0", "amt"),
        ("192.52.193.255", "amt"),
        ("192.52.194.0", "public"),
        // 192.88.99.0/24 deprecated 6to4 relay anycast.
        ("192.88.99.0", "deprecated (6to4 relay anycast)"),
        ("192.88.99.255", "deprecated (6to4 relay anycast)"),
        // 192.168.0.0/16 private-use.
        ("192.167.255.255", "public"),
        ("192.168.0.0", "private-use"),
        ("192.168.255.255", "private-use"),
        ("192.169.0.0", "public"),
        // 192.175.48.0/24 direct delegation AS112.
        ("192.175.48.0", "direct delegation as112 service"),
        ("192.175.48.255", "direct delegation as112 service"),
        ("192.175.49.0", "public"),
        // 198.18.0.0/15 benchmarking.
        ("198.17.255.255", "public"),
        ("198.18.0.0", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("198.20.0.0", "public"),
        // 198.51.100.0/24 TEST-NET-2, 203.0.113.0/24 TEST-NET-3.
        ("198.51.100.0", "documentation (test-net-2)"),
        ("198.51.100.255", "documentation (test-net-2)"),
        ("198.51.101.0", "public"),
        ("203.0.113.0", "documentation (test-net-3)"),
        ("203.0.113.255", "documentation (test-net-3)"),
        ("203.0.114.0", "public"),
        // 224.0.0.0/4 multicast, 240.0.0.0/4 reserved, 255.255.255.255 broadcast.
        ("223.255.255.255", "public"),
        ("224.0.0.0", "multicast"),
        ("239.255.255.255", "multicast"),
        ("240.0.0.0", "reserved"),
        ("255.255.255.254", "reserved"),
        ("255.255.255.255", "limited broadcast"),
        // Ordinary unicast.
        ("8.8.8.8", "public"),
        ("93.184.215.14", "public"),
    ]);
}

#[test]
fn ipv6_special_purpose_registry() {
    check_table(&[
        ("::", "unspecified address"),
        ("::1", "loopback address"),
        ("::2", "ipv4-compatible (deprecated)"),
        ("::127.0.0.1", "ipv4-compatible (deprecated)"),
        ("::8.8.8.8", "ipv4-compatible (deprecated)"),
        ("::ffff:ffff", "ipv4-compatible (deprecated)"),
        ("::1:0:0", "reserved by ietf"),
        ("64:ff9b::", "ipv4-ipv6 translation (nat64)"),
        ("64:ff9b::808:808", "ipv4-ipv6 translation (nat64)"),
        ("64:ff9b::ffff:ffff", "ipv4-ipv6 translation (nat64)"),
        ("64:ff9b:1::", "ipv4-ipv6 translation, local-use (nat64)"),
        (
            "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
            "ipv4-ipv6 translation, local-use (nat64)",
        ),
        ("100::", "discard-only address block"),
        ("100::ffff:ffff:ffff:ffff", "discard-only address block"),
        ("100:0:0:1::", "dummy ipv6 prefix"),
        ("100:0:0:1:ffff:ffff:ffff:ffff", "dummy ipv6 prefix"),
        ("100:0:0:2::", "reserved by ietf"),
        // 2001::/23 and its more specific entries.
        ("2001::", "teredo"),
        ("2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "teredo"),
        ("2001:1::1", "port control protocol anycast"),
        ("2001:1::2", "traversal using relays around nat anycast"),
        ("2001:1::3", "dns-sd service registration protocol anycast"),
        ("2001:1::4", "ietf protocol assignments"),
        ("2001:2::", "benchmarking"),
        ("2001:2:0:ffff:ffff:ffff:ffff:ffff", "benchmarking"),
        ("2001:2:1::", "ietf protocol assignments"),
        ("2001:3::", "amt"),
        ("2001:3:ffff:ffff:ffff:ffff:ffff:ffff", "amt"),
        ("2001:4:112::", "as112-v6"),
        ("2001:4:112:ffff:ffff:ffff:ffff:ffff", "as112-v6"),
        ("2001:10::", "deprecated (previously orchid)"),
        (
            "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff",
            "deprecated (previously orchid)",
        ),
        ("2001:20::", "orchidv2"),
        ("2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", "orchidv2"),
        ("2001:30::", "drone remote id protocol entity tags (dets)"),
        (
            "2001:3f:ffff:ffff:ffff:ffff:ffff:ffff",
            "drone remote id protocol entity tags (dets)",
        ),
        ("2001:40::", "ietf protocol assignments"),
        (
            "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
            "ietf protocol assignments",
        ),
        ("2001:200::", "public"),
        // Documentation, 6to4, AS112, 6bone.
        ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("2001:db8::", "documentation"),
        ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"),
        ("2001:db9::", "public"),
        ("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("2002::", "6to4"),
        ("2002:7f00:1::", "6to4"),
        ("2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "6to4"),
        ("2003::", "public"),
        ("2620:4f:7fff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("2620:4f:8000::", "direct delegation as112 service"),
        (
            "2620:4f:8000:ffff:ffff:ffff:ffff:ffff",
            "direct delegation as112 service",
        ),
        ("2620:4f:8001::", "public"),
        ("3ffd:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("3ffe::", "6bone (returned)"),
        (
            "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "6bone (returned)",
        ),
        ("3fff::", "documentation"),
        ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"),
        // 3fff:1000:: is past 3fff::/20 and still inside 2000::/3.
        ("3fff:1000::", "public"),
        // The edges of 2000::/3 and the blocks outside it.
        (
            "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "reserved by ietf",
        ),
        ("2000::", "public"),
        ("2a00:1450::1", "public"),
        ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "public"),
        ("4000::", "reserved by ietf"),
        ("5f00::", "segment routing (srv6) sids"),
        (
            "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "segment routing (srv6) sids",
        ),
        (
            "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "reserved by ietf",
        ),
        ("fc00::", "unique-local"),
        ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "unique-local"),
        ("fe00::", "reserved by ietf"),
        ("fe80::", "link-local unicast"),
        (
            "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "link-local unicast",
        ),
        ("fec0::", "site-local (deprecated)"),
        (
            "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "site-local (deprecated)",
        ),
        ("ff00::", "multicast"),
        ("ff02::1", "multicast"),
        ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "multicast"),
    ]);
}

#[test]
fn ipv4_mapped_is_classified_by_the_ipv4_inside() {
    check_table(&[
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.1.2.3", "private-use"),
        ("::ffff:169.254.169.254", "link-local"),
        ("::ffff:0.0.0.0", "this host on this network"),
        ("::ffff:8.8.8.8", "public"),
    ]);
    let ip: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
    assert_eq!(
        classify(ip).to_string(),
        "loopback (127.0.0.0/8, IPv4-mapped 127.0.0.1)"
    );
}

#[test]
fn every_non_public_verdict_names_its_range() {
    for addr in [
        "10.0.0.1",
        "::1",
        "64:ff9b::808:808",
        "2002::1",
        "fe80::1",
        "::ffff:127.0.0.1",
    ] {
        let class = classify(addr.parse().unwrap());
        let text = class.to_string();
        assert!(!class.is_public(), "{addr} should be non-public");
        assert!(
            text.contains('/'),
            "{addr}: verdict {text:?} does not name a CIDR"
        );
    }
}

#[test]
fn operator_overrides() {
    let policy = AddressPolicy::new()
        .allow_cidr(parse_cidr("127.0.0.2/32").unwrap())
        .deny_cidr(parse_cidr("8.8.0.0/16").unwrap())
        .deny_cidr(parse_cidr("10.9.0.0/16").unwrap())
        .allow_cidr(parse_cidr("10.0.0.0/8").unwrap());
    let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
    assert_eq!(
        policy.check(ip("127.0.0.2")),
        Ok(AddrPermit::AllowedCidr(parse_cidr("127.0.0.2/32").unwrap()))
    );
    // IPv4-mapped forms hit the same overrides.
    assert!(policy.check(ip("::ffff:127.0.0.2")).is_ok());
    assert_eq!(
        policy.check(ip("127.0.0.3")).unwrap_err().reason,
        Reason::NonPublicAddress
    );
    assert_eq!(
        policy.check(ip("::ffff:127.0.0.3")).unwrap_err().reason,
        Reason::NonPublicAddress
    );
    // A deny wins over the registry's "public" and over an allow.
    let denied = policy.check(ip("8.8.8.8")).unwrap_err();
    assert_eq!(denied.reason, Reason::NonPublicAddress);
    assert!(denied.message.contains("8.8.0.0/16"), "{denied}");
    assert!(policy.check(ip("::ffff:8.8.4.4")).is_err());
    assert!(policy.check(ip("10.9.1.1")).is_err());
    assert!(policy.check(ip("10.8.1.1")).is_ok());
    assert_eq!(policy.check(ip("1.1.1.1")), Ok(AddrPermit::Public));
    // A bare address is a single-address block; host bits are cleared.
    assert_eq!(parse_cidr("127.0.0.2").unwrap().to_string(), "127.0.0.2/32");
    assert_eq!(
        AddressPolicy::new()
            .allow_cidr(parse_cidr("127.0.0.9/8").unwrap())
            .allowed_cidrs()[0]
            .to_string(),
        "127.0.0.0/8"
    );
    assert!(matches!(parse_cidr("10.0.0.0/33"), Err(Error::Cidr { .. })));
    assert!(matches!(parse_cidr("example.com"), Err(Error::Cidr { .. })));
}

#[test]
fn one_non_public_answer_refuses_the_whole_set() {
    let policy = AddressPolicy::new().allow_cidr(parse_cidr("127.0.0.2/32").unwrap());
    let ips = |list: &[&str]| -> Vec<IpAddr> { list.iter().map(|s| s.parse().unwrap()).collect() };
    assert!(policy.check_all(&ips(&["127.0.0.2", "1.1.1.1"])).is_ok());
    let mixed = policy
        .check_all(&ips(&["127.0.0.2", "127.0.0.3"]))
        .unwrap_err();
    assert_eq!(mixed.reason, Reason::NonPublicAddress);
    assert!(mixed.message.contains("127.0.0.3"), "{mixed}");
    assert_eq!(
        policy.check_all(&[]).unwrap_err().reason,
        Reason::NoAddresses
    );
}

fn host(input: &str) -> String {
    match Host::parse(input) {
        Ok(Host::Domain(name)) => format!("name {name}"),
        Ok(Host::Ip(ip)) => format!("ip {ip}"),
        Err(Error::Host { reason, .. }) => format!("error {reason:?}"),
        Err(other) => format!("other error {other}"),
    }
}

#[test]
fn canonical_host_form() {
    let cases: &[(&str, &str)] = &[
        ("pkgs.example.com", "name pkgs.example.com"),
        ("PKGS.Example.COM", "name pkgs.example.com"),
        ("pkgs.example.com.", "name pkgs.example.com"),
        ("pkgs.example.com..", "error EmptyLabel"),
        (".pkgs.example.com", "error EmptyLabel"),
        ("pkgs..example.com", "error EmptyLabel"),
        (".", "error EmptyLabel"),
        ("", "error Empty"),
        ("a_b.example.test", "name a_b.example.test"),
        ("localhost", "name localhost"),
        // IDN to punycode, and punycode validated.
        ("bücher.example", "name xn--bcher-kva.example"),
        ("BÜCHER.example", "name xn--bcher-kva.example"),
        ("xn--bcher-kva.example", "name xn--bcher-kva.example"),
        ("XN--BCHER-KVA.example", "name xn--bcher-kva.example"),
        ("xn--a.example", "error Idna"),
        // Characters that let parsers disagree.
        (
            "evil.example.com%00.pkgs.example.com",
            "error ForbiddenChar('%')",
        ),
        ("user@pkgs.example.com", "error ForbiddenChar('@')"),
        ("pkgs.example.com ", "error ForbiddenChar(' ')"),
        ("pkgs\texample.com", "error ForbiddenChar('\\t')"),
        ("pkgs.example.com\0", "error ForbiddenChar('\\0')"),
        ("pkgs.example.com\r\n", "error ForbiddenChar('\\r')"),
        ("pkgs\u{7f}.example.com", "error ForbiddenChar('\\u{7f}')"),
        ("pkgs.example.com\u{a0}", "error ForbiddenChar('\\u{a0}')"),
        ("pkgs.example.com/x", "error ForbiddenChar('/')"),
        ("pkgs.example.com\\x", "error ForbiddenChar('\\\\')"),
        ("pkgs.example.com#", "error ForbiddenChar('#')"),
        ("pkgs.example.com?", "error ForbiddenChar('?')"),
        ("*.example.com", "error ForbiddenChar('*')"),
        (
            "pkgs.example.com:443",
            "error HasPort(\"pkgs.example.com:443\")",
        ),
        ("-pkgs.example.com", "error HyphenLabel(\"-pkgs\")"),
        ("pkgs-.example.com", "error HyphenLabel(\"pkgs-\")"),
        ("a.-b.example.com", "error HyphenLabel(\"-b\")"),
        ("a-b.example.com", "name a-b.example.com"),
        ("--no-sni-check", "error HyphenLabel(\"--no-sni-check\")"),
        ("pkgs,example.com", "error ForbiddenChar(',')"),
        // Length limits.
        (
            &format!("{}.example", "a".repeat(63)),
            &format!("name {}.example", "a".repeat(63)),
        ),
        (
            &format!("{}.example", "a".repeat(64)),
            &format!("error LabelTooLong({:?})", "a".repeat(64)),
        ),
        (
            &format!("{}example", "a.".repeat(123)),
            &format!("name {}example", "a.".repeat(123)),
        ),
        (
            &format!("{}ab.example", "a.".repeat(123)),
            "error TooLong(256)",
        ),
        (&"a".repeat(2000), "error TooLong(2000)"),
        // IPv4 in every WHATWG form is an IP, never a name.
        ("127.0.0.1", "ip 127.0.0.1"),
        ("2130706433", "ip 127.0.0.1"),
        ("0177.0.0.1", "ip 127.0.0.1"),
        ("0x7f.0.0.1", "ip 127.0.0.1"),
        ("0X7F.0.0.1", "ip 127.0.0.1"),
        ("0x7f000001", "ip 127.0.0.1"),
        ("127.1", "ip 127.0.0.1"),
        ("127.0.1", "ip 127.0.0.1"),
        ("0", "ip 0.0.0.0"),
        ("0x", "ip 0.0.0.0"),
        ("017700000001", "ip 127.0.0.1"),
        ("127.0.0.1.", "ip 127.0.0.1"),
        ("１２７.０.０.１", "ip 127.0.0.1"),
        ("10.0.0.256", "error BadIpv4"),
        ("256.0.0.1", "error BadIpv4"),
        ("1.2.3.4.5", "error BadIpv4"),
        ("4294967296", "error BadIpv4"),
        ("99999999999999999999999", "error BadIpv4"),
        ("08.0.0.1", "error BadIpv4"),
        ("example.123", "error BadIpv4"),
        ("example.0x1f", "error BadIpv4"),
        // A label that merely contains digits is a name.
        ("123.example", "name 123.example"),
        ("0x1g.example", "name 0x1g.example"),
        // IPv6, bracketed or bare; zones refused.
        ("[::1]", "ip ::1"),
        ("::1", "ip ::1"),
        ("[::ffff:127.0.0.1]", "ip ::ffff:127.0.0.1"),
        ("[0:0:0:0:0:0:0:1]", "ip ::1"),
        ("[fe80::1%25eth0]", "error BadIpv6"),
        ("[fe80::1%eth0]", "error BadIpv6"),
        ("[::1", "error BadIpv6"),
        ("[pkgs.example.com]", "error BadIpv6"),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(input, want)| {
            let got = host(input);
            (got != *want).then(|| format!("{input:?}: want {want}, got {got}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "wrong canonical form:\n{}",
        failures.join("\n")
    );
}

#[test]
fn host_display_is_canonical_and_joinable_with_a_port() {
    assert_eq!(
        Host::parse("PKGS.example.com.").unwrap().to_string(),
        "pkgs.example.com"
    );
    assert_eq!(Host::parse("0x7f.1").unwrap().to_string(), "127.0.0.1");
    assert_eq!(Host::parse("::1").unwrap().to_string(), "[::1]");
}

#[test]
fn host_errors_name_the_value() {
    let err = Host::parse("user@pkgs.example.com")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid host \"user@pkgs.example.com\": character '@' is not allowed in a host name"
    );
}

fn matches(pattern: &str, target: &str) -> bool {
    HostPattern::parse(pattern)
        .unwrap()
        .matches(&Host::parse(target).unwrap())
}

#[test]
fn pattern_matching() {
    let cases: &[(&str, &str, bool)] = &[
        ("pkgs.example.com", "pkgs.example.com", true),
        ("pkgs.example.com", "PKGS.EXAMPLE.COM.", true),
        ("PKGS.example.com.", "pkgs.example.com", true),
        ("pkgs.example.com", "a.pkgs.example.com", false),
        ("pkgs.example.com", "example.com", false),
        ("pkgs.example.com", "pkgs.example.com.evil.test", false),
        ("pkgs.example.com", "xpkgs.example.com", false),
        ("*.example.com", "pkgs.example.com", true),
        ("*.example.com", "a.b.c.example.com", true),
        ("*.example.com", "example.com", false),
        ("*.example.com", "example.com.", false),
        ("*.example.com", "badexample.com", false),
        ("*.example.com", "example.com.evil.test", false),
        ("*.EXAMPLE.com", "Files.Example.Com", true),
        ("bücher.example", "xn--bcher-kva.example", true),
        ("*.bücher.example", "a.xn--bcher-kva.example", true),
        ("*", "anything.example.test", true),
        ("*", "localhost", true),
        // IP literals never match a domain pattern, not even `*`.
        ("*", "127.0.0.1", false),
        ("*", "[::1]", false),
        ("*", "2130706433", false),
        ("*.0.0.1", "127.0.0.1", false),
    ];
    for &(pattern, target, want) in cases {
        if HostPattern::parse(pattern).is_err() {
            assert!(!want, "pattern {pattern:?} failed to parse");
            continue;
        }
        assert_eq!(matches(pattern, target), want, "{pattern:?} vs {target:?}");
    }
}

#[test]
fn malformed_patterns_are_refused_with_a_reason() {
    for (pattern, needle) in [
        ("**.example.com", "`*` is only allowed"),
        ("a.*.example.com", "`*` is only allowed"),
        ("*example.com", "`*` is only allowed"),
        ("example.*", "`*` is only allowed"),
        ("*.", "empty"),
        ("", "empty"),
        ("127.0.0.1", "IP literal"),
        ("[::1]", "IP literal"),
        ("*.127.0.0.1", "IP literal"),
        ("pkgs.example.com:443", "host with a port"),
        ("good.example.test:443", "host with a port"),
        ("--no-sni-check", "begins or ends with `-`"),
        ("*.-x.example.com", "begins or ends with `-`"),
        ("pkgs-.example.com", "begins or ends with `-`"),
        ("user@pkgs.example.com", "'@'"),
    ] {
        let err = HostPattern::parse(pattern).expect_err(pattern).to_string();
        assert!(err.contains(needle), "{pattern:?}: {err}");
        assert!(
            err.contains(&format!("{pattern:?}")),
            "{pattern:?} not named in {err}"
        );
    }
}

#[test]
fn allowlist_decisions() {
    assert_eq!(
        HostAllowlist::new(Vec::<String>::new()),
        Err(Error::EmptyHostAllowlist)
    );
    let list = HostAllowlist::new(["pkgs.example.com", "*.files.example.com"]).unwrap();
    let decide = |t: &str| list.check(&Host::parse(t).unwrap()).map(|p| p.to_string());
    assert_eq!(decide("pkgs.example.com"), Ok("pkgs.example.com".into()));
    assert_eq!(
        decide("a.files.example.com"),
        Ok("*.files.example.com".into())
    );
    assert_eq!(
        decide("files.example.com").unwrap_err().reason,
        Reason::DomainNotAllowed
    );
    assert_eq!(
        decide("127.0.0.1").unwrap_err().reason,
        Reason::IpLiteralNotAllowed
    );
}

#[test]
fn target_policy_checks_port_then_host_then_addresses() {
    let mut policy = TargetPolicy::builder()
        .allow("pkgs.example.com")
        .allow("*")
        .build()
        .unwrap();
    let decide = |p: &TargetPolicy, host: &str, port: u16| {
        p.check_target(&Host::parse(host).unwrap(), port)
            .map(|permit| (permit.name.to_string(), permit.rule))
            .map_err(|d| d.reason.code())
    };
    assert_eq!(
        decide(&policy, "PKGS.example.com", 443),
        Ok(("pkgs.example.com".into(), "pkgs.example.com".into()))
    );
    assert_eq!(
        decide(&policy, "other.example.test", 443),
        Ok(("other.example.test".into(), "*".into()))
    );
    // The port is checked first, so a bad port on a bad host reports the port.
    assert_eq!(decide(&policy, "127.0.0.1", 22), Err("port_not_allowed"));
    assert_eq!(
        decide(&policy, "pkgs.example.com", 80),
        Err("port_not_allowed")
    );
    // Loopback in every literal form is refused as non-public, naming the range.
    for literal in [
        "127.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "0x7f.1",
        "127.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
    ] {
        let denial = policy
            .check_target(&Host::parse(literal).unwrap(), 443)
            .unwrap_err();
        assert_eq!(denial.reason, Reason::NonPublicAddress, "{literal}");
        assert!(denial.message.contains("loopback"), "{literal}: {denial}");
    }
    // A public literal is still not a name on the allowlist.
    assert_eq!(
        decide(&policy, "8.8.8.8", 443),
        Err("ip_literal_not_allowed")
    );
    policy.ports = PortSet::new([443, 8443]).unwrap();
    assert!(decide(&policy, "pkgs.example.com", 8443).is_ok());
}

#[test]
fn port_sets() {
    assert_eq!(PortSet::default().to_string(), "{443}");
    assert!(PortSet::default().check(443).is_ok());
    let denial = PortSet::default().check(22).unwrap_err();
    assert_eq!(denial.reason, Reason::PortNotAllowed);
    assert_eq!(
        denial.to_string(),
        "denied by policy (port_not_allowed): port 22 is not in the allowed ports {443}"
    );
    assert!(PortSet::new([0, 443]).is_err());
    assert!(PortSet::new([]).is_err());
    assert_eq!(parse_port("8443"), Ok(8443));
    for bad in ["0", "65536", "-1", "443 ", "", "0x1bb"] {
        assert!(parse_port(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn command_lookup_is_exact() {
    let list = CommandAllowlist::from_pairs([
        ("run_tests", vec!["python3", "-m", "pytest", "-q"]),
        ("lint", vec!["ruff", "check", "."]),
    ])
    .unwrap();
    assert_eq!(
        list.get("run_tests").unwrap().argv(),
        ["python3", "-m", "pytest", "-q"]
    );
    for near_miss in [
        "Run_Tests",
        "RUN_TESTS",
        "run_tests ",
        " run_tests",
        "run",
        "run_tests\0",
        "run_tests;id",
        "run_testsx",
        "",
        "lint\n",
    ] {
        let denial = list.get(near_miss).unwrap_err();
        assert_eq!(denial.reason, Reason::CommandNotAllowed, "{near_miss:?}");
        assert!(
            denial.message.contains("allowed names: lint, run_tests"),
            "{denial}"
        );
    }
    assert!(
        CommandAllowlist::new()
            .get("x")
            .unwrap_err()
            .message
            .contains("(none)")
    );
}

#[test]
fn command_validation_says_what_is_wrong() {
    let bad: &[(&str, &[&str], &str)] = &[
        ("", &["true"], "the name is empty"),
        ("-rf", &["true"], "starts with a letter or digit"),
        ("run tests", &["true"], "' ' is not allowed"),
        ("run/tests", &["true"], "'/' is not allowed"),
        ("ok", &[], "the argv is empty"),
        ("ok", &[""], "argv[0] (the program) is empty"),
        ("ok", &["--privileged"], "starts with `-`"),
        ("ok", &["sh", "-c", "a\0b"], "argv[2] contains a NUL byte"),
    ];
    for &(name, argv, needle) in bad {
        let err = CommandAllowlist::from_pairs([(name, argv.to_vec())])
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{name:?} {argv:?}: {err}");
        assert!(err.contains(&format!("{name:?}")), "name not in {err}");
    }
    let long = "a".repeat(65);
    assert!(CommandAllowlist::from_pairs([(long.as_str(), vec!["true"])]).is_err());
    let dup =
        CommandAllowlist::from_pairs([("a", vec!["true"]), ("a", vec!["false"])]).unwrap_err();
    assert!(dup.to_string().contains("defined twice"), "{dup}");
}

#[test]
fn reason_codes_are_stable() {
    let codes: Vec<&str> = Reason::ALL.iter().map(|r| r.code()).collect();
    assert_eq!(
        codes,
        [
            "command_not_allowed",
            "invalid_host",
            "domain_not_allowed",
            "port_not_allowed",
            "ip_literal_not_allowed",
            "non_public_address",
            "no_addresses",
            "invalid_arguments"
        ]
    );
}

#[test]
fn authorities_are_parsed_once_for_every_layer() {
    let ok = |s: &str, default: Option<u16>| {
        Authority::parse(s, default).map(|a| format!("{} {}", a.host, a.port))
    };
    assert_eq!(
        ok("PKGS.Example.Test.:443", None),
        Ok("pkgs.example.test 443".into())
    );
    assert_eq!(ok("[::1]:8443", None), Ok("[::1] 8443".into()));
    assert_eq!(ok("127.1:443", None), Ok("127.0.0.1 443".into()));
    assert_eq!(
        ok("pkgs.example.test", Some(443)),
        Ok("pkgs.example.test 443".into())
    );
    assert_eq!(ok("[::1]", Some(443)), Ok("[::1] 443".into()));
    assert_eq!(
        Authority::parse("[::1]:8443", None).unwrap().to_string(),
        "[::1]:8443"
    );
    for (bad, default, needle) in [
        ("pkgs.example.test", None, "no port"),
        ("pkgs.example.test:", None, "not a number"),
        ("pkgs.example.test:", Some(443), "not a number"),
        ("pkgs.example.test:0", None, "out of range"),
        ("pkgs.example.test:65536", None, "out of range"),
        ("pkgs.example.test:443x", None, "not a number"),
        ("user@pkgs.example.test:443", None, "userinfo"),
        ("pkgs.example.test\u{0}:443", None, "'\\0'"),
        ("pkgs example.test:443", None, "' '"),
        ("[::1]", None, "no port"),
        ("[::1", Some(443), "missing its `]`"),
        ("[::1]x", Some(443), "unexpected"),
        ("::1:443", None, "in brackets"),
        ("pkgs%2eexample.test:443", None, "'%'"),
        ("", Some(443), "no host"),
    ] {
        let err = ok(bad, default).unwrap_err().to_string();
        assert!(err.contains(needle), "{bad:?}: {err}");
    }
}

#[test]
fn the_unspecified_addresses_are_refused_whatever_the_allow_cidrs_say() {
    let everything = AddressPolicy::new()
        .allow_cidr(parse_cidr("0.0.0.0/0").unwrap())
        .allow_cidr(parse_cidr("::/0").unwrap());
    for ip in ["0.0.0.0", "::", "::ffff:0.0.0.0"] {
        let denial = everything.check(ip.parse().unwrap()).unwrap_err();
        assert_eq!(denial.reason, Reason::NonPublicAddress, "{ip}");
        assert!(denial.message.contains("unspecified"), "{ip}: {denial}");
    }
    assert!(everything.check("127.0.0.2".parse().unwrap()).is_ok());
}

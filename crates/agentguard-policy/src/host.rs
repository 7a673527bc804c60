//! Host names in one canonical form, host patterns, and the host allowlist.
//!
//! Every layer that matches, dials or logs a host goes through [`Host::parse`], so the string
//! that was checked is the string that is used (DESIGN.md, decision 1). The canonical form is
//! ASCII lower case, one trailing dot removed, international names converted to punycode
//! (UTS #46, or refused), and strict rejection of anything a URL or proxy parser might read
//! differently: `%`, `@`, whitespace, control characters, NUL, empty labels, over-long names.
//!
//! A name that "ends in a number" is read the way the WHATWG URL standard (and so every
//! browser and most HTTP clients) reads it: as an IPv4 address, including the decimal
//! (`2130706433`), octal (`0177.0.0.1`), hex (`0x7f.1`) and short (`127.1`) forms. That way
//! `127.1` can never pass as a domain name that a client then dials as loopback.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::decision::{Denial, Reason};
use crate::error::{Error, HostErrorKind, Result};

/// Longest input accepted before any processing, to bound IDNA work on hostile input.
const MAX_INPUT_LEN: usize = 1024;
/// Longest canonical name (RFC 1035, without the root dot).
const MAX_NAME_LEN: usize = 253;
/// Longest label (RFC 1035).
const MAX_LABEL_LEN: usize = 63;

/// A target host: a canonical domain name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A domain name in canonical form.
    Domain(DomainName),
    /// An IP address literal (IPv4 in any WHATWG form, or IPv6, bracketed or not).
    Ip(IpAddr),
}

/// A domain name in canonical form: ASCII lower case, punycode, no trailing dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainName(String);

impl DomainName {
    /// The canonical name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when `self` is a strict subdomain of `parent` (any depth, never `parent` itself).
    pub fn is_subdomain_of(&self, parent: &DomainName) -> bool {
        self.0.len() > parent.0.len() + 1
            && self.0.ends_with(parent.as_str())
            && self.0.as_bytes()[self.0.len() - parent.0.len() - 1] == b'.'
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Host {
    /// Canonical text: the name, the IPv4 address in dotted decimal, or `[v6]` in brackets so
    /// that the text can be joined with `:port` unambiguously.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Domain(name) => name.fmt(f),
            Host::Ip(IpAddr::V4(ip)) => ip.fmt(f),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

impl Host {
    /// Parses a host (no port, no scheme) into canonical form, or refuses it.
    ///
    /// Accepts a domain name, an IPv4 address in any form the WHATWG URL standard accepts, a
    /// bracketed IPv6 literal (`[::1]`), or a bare IPv6 literal. Zone identifiers (`%eth0`)
    /// are refused.
    pub fn parse(input: &str) -> Result<Host> {
        parse_host(input).map_err(|reason| Error::Host {
            input: input.to_owned(),
            reason,
        })
    }

    /// The domain name, if this host is one.
    pub fn domain(&self) -> Option<&DomainName> {
        match self {
            Host::Domain(name) => Some(name),
            Host::Ip(_) => None,
        }
    }
}

fn parse_host(input: &str) -> std::result::Result<Host, HostErrorKind> {
    if input.is_empty() {
        return Err(HostErrorKind::Empty);
    }
    if input.len() > MAX_INPUT_LEN {
        return Err(HostErrorKind::TooLong(input.len()));
    }
    if let Some(inner) = input.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or(HostErrorKind::BadIpv6)?;
        return parse_ipv6(inner);
    }
    if input.contains(':') {
        // Only an IPv6 literal may contain a colon; a `host:port` must be split by the caller.
        return parse_ipv6(input).map_err(|e| match input.rsplit_once(':') {
            Some((host, port))
                if !host.contains(':')
                    && !port.is_empty()
                    && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                HostErrorKind::HasPort(input.to_owned())
            }
            _ => e,
        });
    }
    for c in input.chars() {
        if forbidden_anywhere(c) {
            return Err(HostErrorKind::ForbiddenChar(c));
        }
    }
    let trimmed = input.strip_suffix('.').unwrap_or(input);
    let ascii = if trimmed.is_ascii() && !has_ace_label(trimmed) {
        trimmed.to_ascii_lowercase()
    } else {
        idna::domain_to_ascii_cow(trimmed.as_bytes(), idna::AsciiDenyList::URL)
            .map_err(|_| HostErrorKind::Idna)?
            .into_owned()
    };
    if ascii.is_empty() {
        return Err(HostErrorKind::EmptyLabel);
    }
    // UTS #46 may map other characters to ASCII; validate the result again, strictly.
    for label in ascii.split('.') {
        if label.is_empty() {
            return Err(HostErrorKind::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(HostErrorKind::LabelTooLong(label.to_owned()));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(HostErrorKind::HyphenLabel(label.to_owned()));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
        {
            return Err(HostErrorKind::ForbiddenChar(c));
        }
    }
    if ends_in_number(&ascii) {
        return parse_whatwg_ipv4(&ascii)
            .map(|ip| Host::Ip(IpAddr::V4(ip)))
            .ok_or(HostErrorKind::BadIpv4);
    }
    if ascii.len() > MAX_NAME_LEN {
        return Err(HostErrorKind::TooLong(ascii.len()));
    }
    Ok(Host::Domain(DomainName(ascii)))
}

fn parse_ipv6(text: &str) -> std::result::Result<Host, HostErrorKind> {
    text.parse::<Ipv6Addr>()
        .map(|ip| Host::Ip(IpAddr::V6(ip)))
        .map_err(|_| HostErrorKind::BadIpv6)
}

/// Characters refused before any processing: the DESIGN.md list plus URL delimiters that
/// would let one parser see a different host than another.
fn forbidden_anywhere(c: char) -> bool {
    c == '\0'
        || c.is_control()
        || c.is_whitespace()
        || matches!(
            c,
            '%' | '@' | '/' | '\\' | '?' | '#' | '[' | ']' | '<' | '>' | '^' | '|' | '*' | '"'
        )
}

fn has_ace_label(name: &str) -> bool {
    name.split('.')
        .any(|label| label.len() >= 4 && label[..4].eq_ignore_ascii_case("xn--"))
}

/// The WHATWG "ends in a number" check: the last label is all digits or `0x` + hex digits.
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last.strip_prefix("0x")
        .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The WHATWG IPv4 parser: one to four parts, each decimal, octal (leading 0) or hex (0x).
pub(crate) fn parse_whatwg_ipv4(name: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        numbers.push(parse_ipv4_number(part)?);
    }
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|&n| n > 255) {
        return None;
    }
    let last_bits = 8 * (5 - numbers.len() as u32);
    if last_bits < 64 && *last >= 1u64 << last_bits {
        return None;
    }
    let mut value = *last;
    for (i, n) in init.iter().enumerate() {
        value += n << (8 * (3 - i as u32));
    }
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

fn parse_ipv4_number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() {
        return Some(0);
    }
    let mut value: u64 = 0;
    for c in digits.chars() {
        let d = c.to_digit(radix)?;
        value = value.checked_mul(radix as u64)?.checked_add(d as u64)?;
        if value > u64::from(u32::MAX) {
            return None;
        }
    }
    Some(value)
}

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// `*`: any domain name (never an IP literal). Address checks still apply downstream.
    AnyName,
    /// `example.com`: exactly that name.
    Exact(DomainName),
    /// `*.example.com`: any subdomain at any depth, but not `example.com` itself.
    Subdomains(DomainName),
}

impl HostPattern {
    /// Parses a pattern: `*`, `name`, or `*.name`. The name part is canonicalized like a host.
    pub fn parse(pattern: &str) -> Result<HostPattern> {
        let refuse = |reason: String| Error::Pattern {
            pattern: pattern.to_owned(),
            reason,
        };
        if pattern == "*" {
            return Ok(HostPattern::AnyName);
        }
        let (wildcard, rest) = match pattern.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        if rest.contains('*') {
            return Err(refuse(
                "`*` is only allowed alone or as the whole first label (`*.example.com`)".into(),
            ));
        }
        match Host::parse(rest) {
            Ok(Host::Domain(name)) if wildcard => Ok(HostPattern::Subdomains(name)),
            Ok(Host::Domain(name)) => Ok(HostPattern::Exact(name)),
            Ok(Host::Ip(ip)) => Err(refuse(format!(
                "{ip} is an IP literal; host patterns match names only (use an allow CIDR to reach an address range)"
            ))),
            Err(Error::Host { reason, .. }) => Err(refuse(reason.to_string())),
            Err(other) => Err(other),
        }
    }

    /// True when the host matches. IP literals never match a domain pattern.
    pub fn matches(&self, host: &Host) -> bool {
        let Host::Domain(name) = host else {
            return false;
        };
        match self {
            HostPattern::AnyName => true,
            HostPattern::Exact(exact) => name == exact,
            HostPattern::Subdomains(parent) => name.is_subdomain_of(parent),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::AnyName => f.write_str("*"),
            HostPattern::Exact(name) => name.fmt(f),
            HostPattern::Subdomains(name) => write!(f, "*.{name}"),
        }
    }
}

/// A non-empty list of host patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAllowlist {
    patterns: Vec<HostPattern>,
}

impl HostAllowlist {
    /// Builds an allowlist from pattern strings. An empty list is an error: it never means
    /// "allow everything".
    pub fn new<I, S>(patterns: I) -> Result<HostAllowlist>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let patterns = patterns
            .into_iter()
            .map(|p| HostPattern::parse(p.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        if patterns.is_empty() {
            return Err(Error::EmptyHostAllowlist);
        }
        Ok(HostAllowlist { patterns })
    }

    /// The patterns, in the order given.
    pub fn patterns(&self) -> &[HostPattern] {
        &self.patterns
    }

    /// The first pattern that matches the host, or a denial.
    pub fn check(&self, host: &Host) -> std::result::Result<&HostPattern, Denial> {
        if let Host::Ip(ip) = host {
            return Err(Denial::new(
                Reason::IpLiteralNotAllowed,
                format!("{ip} is an IP literal; only host names on the allowlist may be reached"),
            ));
        }
        self.patterns
            .iter()
            .find(|p| p.matches(host))
            .ok_or_else(|| {
                Denial::new(
                    Reason::DomainNotAllowed,
                    format!("host {host} matches no allowlist pattern"),
                )
            })
    }
}

//! Error types for agentguard-policy: invalid configuration and invalid input.
//!
//! A policy *denial* is not an error: it is a [`crate::Denial`] value. Errors here mean the
//! input could not be understood at all (a host that is not a host, a pattern that is not a
//! pattern), and every message names the value and says what to do.

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can be wrong with policy input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A host name or IP literal could not be parsed into canonical form.
    #[error("invalid host {input:?}: {reason}")]
    Host {
        /// The host exactly as given.
        input: String,
        /// Why it was refused.
        reason: HostErrorKind,
    },
    /// An allowlist pattern is malformed.
    #[error("invalid host pattern {pattern:?}: {reason}")]
    Pattern {
        /// The pattern exactly as given.
        pattern: String,
        /// Why it was refused, and what to write instead.
        reason: String,
    },
    /// A host allowlist with no patterns was requested.
    #[error(
        "the host allowlist is empty; an empty allowlist never means \"allow everything\": name at least one host (for example pkgs.example.com or *.example.com)"
    )]
    EmptyHostAllowlist,
    /// A port value is out of range or the port set is empty.
    #[error("invalid port {value:?}: {reason}")]
    Port {
        /// The value exactly as given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// A `host:port` could not be parsed.
    #[error("invalid host:port {input:?}: {reason}")]
    Authority {
        /// The text as given (at most 256 characters of it).
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A CIDR (for allow/deny overrides) could not be parsed.
    #[error("invalid CIDR {value:?}: {reason}")]
    Cidr {
        /// The value exactly as given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// A command allowlist entry is malformed.
    #[error("invalid command {name:?}: {reason}")]
    Command {
        /// The command name exactly as given.
        name: String,
        /// Why it was refused.
        reason: String,
    },
}

/// Why a host was refused. Each variant names one rule of the canonical host form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostErrorKind {
    /// The host is the empty string.
    #[error("the host is empty")]
    Empty,
    /// The host contains a character that is never valid in a host name.
    #[error("character {0:?} is not allowed in a host name")]
    ForbiddenChar(char),
    /// A label begins or ends with `-` (never a host name; on a command line it reads as an
    /// option).
    #[error("label {0:?} begins or ends with `-`, which no host name does")]
    HyphenLabel(String),
    /// A `host:port` was given where only a host belongs.
    #[error(
        "{0:?} is a host with a port: give the host alone (ports are allowed separately, with allow_ports or --allow-port)"
    )]
    HasPort(String),
    /// The host contains an empty label (`a..b`, a leading dot, or two trailing dots).
    #[error("empty label (a leading dot, `..`, or more than one trailing dot)")]
    EmptyLabel,
    /// One label is longer than 63 octets.
    #[error("label {0:?} is longer than 63 octets")]
    LabelTooLong(String),
    /// The whole name is longer than 253 octets.
    #[error("the name is {0} octets long; at most 253 are allowed")]
    TooLong(usize),
    /// International domain name processing (UTS #46) refused the name.
    #[error("not a valid internationalized domain name (IDNA/punycode conversion failed)")]
    Idna,
    /// The name ends in a number, so it is an IPv4 literal, but not a valid one.
    #[error(
        "the name ends in a number, so it is read as an IPv4 address, but it is not a valid one"
    )]
    BadIpv4,
    /// A bracketed IPv6 literal is malformed.
    #[error("not a valid IPv6 literal (zone identifiers are not accepted)")]
    BadIpv6,
}

//! Denials as values: the stable reason codes every layer reports.
//!
//! A refused command, host, port or address is an ordinary outcome of a policy check, not an
//! error, so checks return `Result<Permit, Denial>` and the caller decides how to answer
//! (an HTTP status, an exit code, an audit event). The reason code is a stable contract:
//! scripts and agents match on it, so existing codes never change meaning.

use std::fmt;

/// The stable, machine-readable reason for a denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The command name is not in the command allowlist.
    CommandNotAllowed,
    /// The host is not in canonical form or not a host at all.
    InvalidHost,
    /// The host name matches no allowlist pattern.
    DomainNotAllowed,
    /// The port is not in the allowed port set.
    PortNotAllowed,
    /// The target is an IP literal; only host names are matched by the allowlist.
    IpLiteralNotAllowed,
    /// An address is not public (or is in an operator deny range).
    NonPublicAddress,
    /// A name resolved to no addresses at all.
    NoAddresses,
    /// A value given for a command's param was refused by its type's rules (or a param was
    /// missing, unknown or repeated).
    InvalidArguments,
}

impl Reason {
    /// Every reason, in the order docs/policy.md lists them (tidy checks the two agree).
    pub const ALL: &[Reason] = &[
        Reason::CommandNotAllowed,
        Reason::InvalidHost,
        Reason::DomainNotAllowed,
        Reason::PortNotAllowed,
        Reason::IpLiteralNotAllowed,
        Reason::NonPublicAddress,
        Reason::NoAddresses,
        Reason::InvalidArguments,
    ];

    /// The stable snake_case code, as used in audit events, HTTP headers and JSON output.
    pub const fn code(self) -> &'static str {
        match self {
            Reason::CommandNotAllowed => "command_not_allowed",
            Reason::InvalidHost => "invalid_host",
            Reason::DomainNotAllowed => "domain_not_allowed",
            Reason::PortNotAllowed => "port_not_allowed",
            Reason::IpLiteralNotAllowed => "ip_literal_not_allowed",
            Reason::NonPublicAddress => "non_public_address",
            Reason::NoAddresses => "no_addresses",
            Reason::InvalidArguments => "invalid_arguments",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A policy refusal: the stable reason code plus a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The stable reason code.
    pub reason: Reason,
    /// What was refused, with the value and the rule that refused it.
    pub message: String,
}

impl Denial {
    pub(crate) fn new(reason: Reason, message: impl Into<String>) -> Self {
        Denial {
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "denied by policy ({}): {}", self.reason, self.message)
    }
}

impl std::error::Error for Denial {}

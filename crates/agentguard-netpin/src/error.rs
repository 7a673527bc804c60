//! Error types for agentguard-netpin: building a fetcher, and why a fetch was refused.

use std::net::SocketAddr;
use std::time::Duration;

use agentguard_policy::Denial;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A fetcher or resolver could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An allowlist, port or CIDR is invalid.
    #[error(transparent)]
    Policy(#[from] agentguard_policy::Error),
    /// Extra trust roots could not be read.
    #[error(
        "invalid extra CA certificates: {0}; give a PEM file with one or more CERTIFICATE blocks"
    )]
    Roots(String),
    /// The resolver could not be configured.
    #[error("cannot configure the DNS resolver: {0}")]
    Resolver(String),
    /// A name server address is not usable.
    #[error("invalid name server {0:?}: expected IP:PORT, for example 127.0.0.1:5353")]
    NameServer(String),
}

/// Why a fetch did not return a body. Every variant has a stable [`FetchError::reason`] code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The URL is not an https URL this fetcher accepts.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// Policy refused the host, port or an address.
    #[error("{0}")]
    Denied(Denial),
    /// The name did not resolve (NXDOMAIN, no answer, resolver error).
    #[error("DNS lookup of {name} failed: {message}")]
    Dns {
        /// The name.
        name: String,
        /// The resolver's message.
        message: String,
    },
    /// The name has more addresses than are considered.
    #[error(
        "{name} resolved to {count} addresses; at most {limit} are considered, so the name is refused"
    )]
    TooManyAnswers {
        /// The name.
        name: String,
        /// Answers received.
        count: usize,
        /// The bound.
        limit: usize,
    },
    /// No checked address accepted a connection.
    #[error("could not connect to any checked address of {name}: {message}")]
    Connect {
        /// The name.
        name: String,
        /// What each attempt said.
        message: String,
    },
    /// A stage took longer than its limit.
    #[error("{stage} timed out after {limit:?}")]
    Timeout {
        /// `connect`, `tls handshake` or `fetch`.
        stage: &'static str,
        /// The limit.
        limit: Duration,
    },
    /// The TLS handshake failed (certificate not valid for the name, untrusted CA, ...).
    #[error("TLS handshake with {addr} failed: {message}")]
    Tls {
        /// The address dialed.
        addr: SocketAddr,
        /// rustls' message.
        message: String,
    },
    /// The HTTP exchange failed.
    #[error("HTTP error: {0}")]
    Http(String),
    /// The server answered with a redirect, which is never followed.
    #[error(
        "refused to follow a {status} redirect to {location:?}; fetch that URL explicitly if it is allowed"
    )]
    Redirect {
        /// The status code.
        status: u16,
        /// The Location header (empty when missing).
        location: String,
    },
    /// The body is larger than the limit.
    #[error("the response body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: u64,
    },
    /// The decision could not be recorded in the audit log, so nothing is returned.
    #[error("the fetch was not returned because its audit event could not be recorded: {0}")]
    Audit(#[from] agentguard_audit::Error),
}

impl FetchError {
    /// The stable reason code, as recorded in the audit log and printed by the CLI.
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::InvalidUrl(_) => "invalid_url",
            FetchError::Denied(denial) => denial.reason.code(),
            FetchError::Dns { .. } => "dns_failure",
            FetchError::TooManyAnswers { .. } => "too_many_answers",
            FetchError::Connect { .. } => "connect_failed",
            FetchError::Timeout { .. } => "timeout",
            FetchError::Tls { .. } => "tls_error",
            FetchError::Http(_) => "http_error",
            FetchError::Redirect { .. } => "redirect_refused",
            FetchError::BodyTooLarge { .. } => "body_too_large",
            FetchError::Audit(_) => "audit_failed",
        }
    }

    /// True when a rule (policy, redirect, size limit) refused, rather than the network failing.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            FetchError::InvalidUrl(_)
                | FetchError::Denied(_)
                | FetchError::TooManyAnswers { .. }
                | FetchError::Redirect { .. }
                | FetchError::BodyTooLarge { .. }
        )
    }
}

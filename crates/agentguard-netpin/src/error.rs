//! Error types for agentguard-netpin: building a fetcher, resolving and checking a name,
//! dialing it, and why a fetch was refused.
//!
//! Causes are kept as `#[source]`, never flattened into the message, and no message repeats
//! its cause: print a whole chain with [`agentguard_audit::error_chain`] (as the audit events
//! and the CLI do). [`PinError`] and [`DialError`] are what the egress proxy gets back from
//! [`crate::pin`] and [`crate::dial`]; the fetcher wraps them in [`FetchError`]. Each has a
//! stable `reason()` code, shared by every layer that reports it.

use std::net::SocketAddr;
use std::time::Duration;

use agentguard_policy::Denial;

/// The stable reason codes netpin reports, shared with the egress proxy so that one
/// condition has one code in every layer.
pub mod reason {
    /// The name did not resolve.
    pub const DNS_FAILURE: &str = "dns_failure";
    /// The name resolved to more addresses than are considered.
    pub const TOO_MANY_ANSWERS: &str = "too_many_answers";
    /// Every checked address refused the connection.
    pub const CONNECT_FAILED: &str = "connect_failed";
    /// No checked address answered within the connect timeout.
    pub const DIAL_TIMEOUT: &str = "dial_timeout";
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any error a resolver returns, kept whole.
pub type LookupError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A fetcher or resolver could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No policy was given, or its allowlist is empty.
    #[error(transparent)]
    Policy(#[from] agentguard_policy::Error),
    /// Extra trust roots could not be read or used.
    #[error("invalid extra CA certificates; give a PEM file with one or more CERTIFICATE blocks")]
    Roots(#[source] LookupError),
    /// No trust root at all would be left.
    #[error("no trust roots at all: keep the bundled roots or add a CA")]
    NoRoots,
    /// The resolver could not be configured.
    #[error("cannot configure the DNS resolver")]
    Resolver(#[source] LookupError),
    /// The resolver was asked to use no name server at all.
    #[error("no name servers given; name at least one IP:PORT, or use the system resolver")]
    NoNameServers,
    /// A name server address is not usable.
    #[error("invalid name server {0:?}: expected IP:PORT, for example 127.0.0.1:5353")]
    NameServer(String),
}

/// Why a name could not be pinned: resolved once, every answer checked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// An answer is not public (or is in an operator deny range), or there is none.
    #[error("{0}")]
    Denied(Denial),
    /// The name did not resolve (NXDOMAIN, no answer, resolver error).
    #[error("DNS lookup of {name} failed")]
    Dns {
        /// The name.
        name: String,
        /// The resolver's error.
        #[source]
        source: LookupError,
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
}

impl PinError {
    /// The stable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            PinError::Denied(denial) => denial.reason.code(),
            PinError::Dns { .. } => reason::DNS_FAILURE,
            PinError::TooManyAnswers { .. } => reason::TOO_MANY_ANSWERS,
        }
    }

    /// True when a rule refused the name, false when resolution failed.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, PinError::Dns { .. })
    }
}

/// Why no checked address accepted a connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialError {
    /// The dial took longer than its limit.
    #[error("connect timed out after {limit:?}")]
    Timeout {
        /// The limit.
        limit: Duration,
    },
    /// Every checked address refused or failed.
    #[error("could not connect to any checked address of {name}: {}", attempts_text(.attempts))]
    Connect {
        /// The name.
        name: String,
        /// Each address tried and its error, in order (several causes, so not one source).
        attempts: Vec<(SocketAddr, std::io::Error)>,
    },
}

fn attempts_text(attempts: &[(SocketAddr, std::io::Error)]) -> String {
    attempts
        .iter()
        .map(|(addr, e)| format!("{addr}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl DialError {
    /// The stable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            DialError::Timeout { .. } => reason::DIAL_TIMEOUT,
            DialError::Connect { .. } => reason::CONNECT_FAILED,
        }
    }
}

/// Why a fetch did not return a body. Every variant has a stable [`FetchError::reason`] code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The URL is not an https URL this fetcher accepts.
    #[error("invalid URL")]
    InvalidUrl(#[source] crate::url::UrlError),
    /// Policy refused the host or port before any DNS query.
    #[error("{0}")]
    Denied(Denial),
    /// The name could not be pinned: too many answers, or no resolution. (A refused answer
    /// is [`FetchError::Denied`], like every other policy denial.)
    #[error(transparent)]
    Pin(PinError),
    /// No checked address accepted a connection in time.
    #[error(transparent)]
    Dial(#[from] DialError),
    /// A stage took longer than its limit.
    #[error("{stage} timed out after {limit:?}")]
    Timeout {
        /// `tls handshake` or `fetch`.
        stage: &'static str,
        /// The limit.
        limit: Duration,
    },
    /// The TLS handshake failed (certificate not valid for the name, untrusted CA, ...).
    #[error("TLS handshake with {addr} failed")]
    Tls {
        /// The address dialed.
        addr: SocketAddr,
        /// rustls' error, inside the I/O error tokio-rustls returns.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("HTTP exchange failed")]
    Http(#[source] LookupError),
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
    #[error("the fetch was not returned because its audit event could not be recorded")]
    Audit(#[from] agentguard_audit::Error),
}

impl From<PinError> for FetchError {
    fn from(error: PinError) -> FetchError {
        match error {
            PinError::Denied(denial) => FetchError::Denied(denial),
            other => FetchError::Pin(other),
        }
    }
}

impl FetchError {
    /// Every reason code a fetch reports besides the policy's own denials (docs/netpin.md
    /// lists them; tidy checks the two agree).
    pub const REASONS: &[&str] = &[
        "invalid_url",
        reason::TOO_MANY_ANSWERS,
        "redirect_refused",
        "body_too_large",
        "timeout",
        reason::DNS_FAILURE,
        reason::CONNECT_FAILED,
        "tls_error",
        "http_error",
        "audit_failed",
    ];

    /// The stable reason code, as recorded in the audit log and printed by the CLI.
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::InvalidUrl(_) => "invalid_url",
            FetchError::Denied(denial) => denial.reason.code(),
            FetchError::Pin(e) => e.reason(),
            FetchError::Dial(DialError::Timeout { .. }) | FetchError::Timeout { .. } => "timeout",
            FetchError::Dial(e) => e.reason(),
            FetchError::Tls { .. } => "tls_error",
            FetchError::Http(_) => "http_error",
            FetchError::Redirect { .. } => "redirect_refused",
            FetchError::BodyTooLarge { .. } => "body_too_large",
            FetchError::Audit(_) => "audit_failed",
        }
    }

    /// True when a rule (policy, redirect, size limit) refused, rather than the network failing.
    pub fn is_refusal(&self) -> bool {
        match self {
            FetchError::InvalidUrl(_)
            | FetchError::Denied(_)
            | FetchError::Redirect { .. }
            | FetchError::BodyTooLarge { .. } => true,
            FetchError::Pin(e) => e.is_refusal(),
            _ => false,
        }
    }

    /// True when a time limit ended the fetch.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            FetchError::Timeout { .. } | FetchError::Dial(DialError::Timeout { .. })
        )
    }
}

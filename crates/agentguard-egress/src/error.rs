//! Error types for agentguard-egress: the proxy could not be configured or started.

use std::net::SocketAddr;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The allowlist, ports or CIDRs are invalid (an empty allowlist included).
    #[error(transparent)]
    Policy(#[from] agentguard_policy::Error),
    /// The resolver could not be configured.
    #[error(transparent)]
    Resolver(#[from] agentguard_netpin::Error),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The UNIX socket could not be created (it may exist already: the proxy never
    /// replaces a file).
    #[error("cannot listen on the UNIX socket {path}", path = path.display())]
    BindUnix {
        /// The socket's path.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A limit has an unusable value.
    #[error("invalid `{field}`: {reason}")]
    Limit {
        /// The setting.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A credential route is not valid.
    #[error("route {route:?}: {message}")]
    Route {
        /// The route's name.
        route: String,
        /// What is wrong and what to write instead (never the secret).
        message: String,
    },
    /// The proxy's thread or runtime could not be started (blocking wrapper).
    #[error("cannot start the proxy's thread and runtime")]
    Runtime(#[source] std::io::Error),
    /// The proxy's thread ended before it listened.
    #[error("the proxy thread ended before it listened")]
    ThreadEnded,
    /// The audit sink refused the event announcing a policy, so the policy was not put in place.
    #[error(
        "the policy's load could not be recorded in the audit log; the policy in place is kept"
    )]
    AuditFailed,
}

//! The egress proxy: accepts `CONNECT host:port` only, for allowlisted hosts and ports,
//! resolves through netpin's pinning resolver, refuses non-public addresses, tunnels to the
//! checked address, and audits every decision and every tunnel close.
//!
//! It exists so that tools which need some network access (a package install) get exactly the
//! hosts they need and nothing else. It cannot see inside TLS: see docs/egress.md for how to
//! make it the only way out and what it does not stop.
//!
//! It also serves credential routes (docs/routes.md): plain-HTTP requests for
//! `/ROUTE/path` that the proxy itself sends to the route's https upstream with a secret the
//! client never sees, and whose answers it redacts.

#![warn(missing_docs)]

mod blocking;
mod builder;
mod connection;
mod decide;
mod error;
mod forward;
mod head;
mod hello;
mod limits;
mod live;
mod pipe;
mod redact;
mod response;
mod route;
mod route_body;
mod route_headers;
mod route_rules;
mod route_target;
mod server;
mod shared;
mod sni;
mod socket;
mod tunnel;
mod upstream;

pub use blocking::BlockingEgressProxy;
pub use builder::EgressProxyBuilder;
pub use error::{Error, Result};
pub use head::{RequestLine, check_route_head, parse_head};
pub use limits::{
    ConnectionBudget, DESCRIPTORS_PER_TUNNEL, MAX_CONNECTIONS, MAX_TIMEOUT, RESERVED_DESCRIPTORS,
    connections_for, raise_nofile_limit,
};
pub use live::ProxyRules;
pub use redact::REDACTED;
pub use response::RefusalKind;
pub use route::{Credential, DEFAULT_MAX_REQUEST_BYTES, Route, RouteBuilder, Secret};
pub use route_headers::{DROPPED_REQUEST_HEADERS, DROPPED_RESPONSE_HEADERS};
pub use route_rules::{DEFAULT_ROUTE_METHODS, check_path_prefix, methods as route_methods};
pub use route_target::{RouteTarget, TargetError, parse_route_target, path_allowed};
pub use server::{EgressProxy, Reloaded, Shutdown};
pub use sni::{Hello, server_name};

/// Client text in a log line, with control characters escaped.
pub(crate) fn escape(text: &str) -> agentguard_audit::Escaped<'_> {
    agentguard_audit::Escaped(text)
}

/// Entry points for the fuzz targets in `fuzz/` (not an API: they wrap crate-private pieces).
#[doc(hidden)]
pub mod fuzzing {
    use crate::redact::{Pattern, Redactor, redact_all, secret_patterns};

    /// `secret` as a route with `Bearer {secret}` redacts it: the body streamed in `chunks`,
    /// and the same bytes redacted at once.
    pub fn redact(secret: &[u8], chunks: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
        let mut patterns = secret_patterns(secret);
        let mut value = b"Bearer ".to_vec();
        value.extend_from_slice(secret);
        patterns.push(Pattern::after(value, 7));
        let mut redactor = Redactor::new(patterns.clone());
        let mut streamed = Vec::new();
        for chunk in chunks {
            streamed.extend(redactor.push(chunk));
        }
        streamed.extend(redactor.finish());
        (streamed, redact_all(&patterns, &chunks.concat()))
    }
}

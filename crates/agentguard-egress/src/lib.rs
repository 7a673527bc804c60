//! The egress proxy: accepts `CONNECT host:port` only, for allowlisted hosts and ports,
//! resolves through netpin's pinning resolver, refuses non-public addresses, tunnels to the
//! checked address, and audits every decision and every tunnel close.
//!
//! It exists so that tools which need some network access (a package install) get exactly the
//! hosts they need and nothing else. It cannot see inside TLS: see docs/egress.md for how to
//! make it the only way out and what it does not stop.

#![warn(missing_docs)]

mod blocking;
mod builder;
mod connection;
mod error;
mod head;
mod response;
mod server;
mod tunnel;

pub use blocking::BlockingEgressProxy;
pub use builder::EgressProxyBuilder;
pub use error::{Error, Result};
pub use response::RefusalKind;
pub use server::{EgressProxy, Shutdown};

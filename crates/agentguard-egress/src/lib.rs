//! The egress proxy: accepts `CONNECT host:port` only, for allowlisted hosts and ports,
//! resolves through the pinning resolver, refuses non-public addresses, and audits every
//! decision.
//!
//! It exists so that tools which need some network access (a package install) get exactly the
//! hosts they need and nothing else. Status: the proxy is the subject of the egress issue and
//! is not written yet; this crate is an empty placeholder until then.

#![warn(missing_docs)]

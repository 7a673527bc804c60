//! DNS-pinned fetching: resolve a name once, require every answer to be public, and dial
//! exactly the checked addresses while TLS still verifies the certificate for the name.
//!
//! It exists so that a DNS server cannot answer one address for the check and another for the
//! connection (DNS rebinding). This crate is the only place in the workspace that resolves
//! names; the egress proxy reuses it. Status: the resolver, dialer and fetcher are the subject
//! of the netpin issue and are not written yet; this crate is an empty placeholder until then.

#![warn(missing_docs)]

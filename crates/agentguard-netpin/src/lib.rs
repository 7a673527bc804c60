//! DNS-pinned fetching: resolve a name once, require every answer to be public, and dial
//! exactly the checked addresses while TLS still verifies the certificate for the name.
//!
//! It exists so that a DNS server cannot answer one address for the check and another for the
//! connection (DNS rebinding). This crate is the only place in the workspace that resolves
//! names: [`pin`] and [`dial`] are reused by the egress proxy, and [`Fetcher`] is the
//! seed's `NetworkExecutor`. Nothing here reads the environment, so proxy variables cannot
//! redirect a request.

#![warn(missing_docs)]

mod connect;
mod error;
mod fetch;
mod pin;
mod resolve;
mod url;

pub use connect::{Connected, PinnedTls};
pub use error::{DialError, Error, FetchError, LookupError, PinError, Result, reason};
pub use fetch::{DEFAULT_MAX_BYTES, Fetcher, FetcherBuilder, Response};
pub use pin::{DEFAULT_MAX_ANSWERS, PinnedHost, dial, pin};
pub use resolve::{BoxFuture, DnsResolver, Resolve};
pub use url::{HttpsUrl, UrlError};

#[cfg(test)]
mod tests;

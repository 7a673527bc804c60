//! `host:port` authorities and ports as people and clients write them, parsed once.
//!
//! The egress proxy reads a CONNECT target (`host:port`, `[v6]:port`, the port required) and
//! the fetcher reads a URL's authority (the port optional, 443 by default). Both go through
//! [`Authority::parse`], so a bracket, a colon or a port means the same thing in every layer,
//! and the host that comes out is the canonical [`Host`] that is then matched, dialed and
//! logged.

use std::fmt;

use crate::error::{Error, Result};
use crate::host::Host;

/// A canonical host and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Authority {
    /// The host, canonical.
    pub host: Host,
    /// The port (1-65535).
    pub port: u16,
}

impl fmt::Display for Authority {
    /// `host:port`, with an IPv6 literal in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Authority {
    /// Parses `host:port` or `[v6]:port`. With `default_port`, the port may be left out
    /// (`host`, `[v6]`); without it, a missing port is refused.
    ///
    /// Userinfo (`user@`), whitespace, control characters and an unbracketed IPv6 literal are
    /// refused, and the host must pass [`Host::parse`].
    pub fn parse(text: &str, default_port: Option<u16>) -> Result<Authority> {
        split(text, default_port).map_err(|reason| Error::Authority {
            input: text.chars().take(256).collect(),
            reason,
        })
    }
}

fn split(text: &str, default_port: Option<u16>) -> std::result::Result<Authority, String> {
    if text.contains('@') {
        return Err("userinfo (`user@`) is not allowed in a host:port".into());
    }
    if let Some(c) = text.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("character {c:?} is not allowed in a host:port"));
    }
    if text.is_empty() {
        return Err("there is no host".into());
    }
    let (host, port) = if text.starts_with('[') {
        let close = text.find(']').ok_or("an IPv6 literal is missing its `]`")?;
        let rest = &text[close + 1..];
        let port = match rest.strip_prefix(':') {
            Some(port) => Some(port),
            None if rest.is_empty() => None,
            None => return Err(format!("unexpected {rest:?} after the IPv6 literal")),
        };
        (&text[..=close], port)
    } else {
        match text.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Err("an IPv6 literal must be in brackets: [addr]:port".into());
            }
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match (port, default_port) {
        (Some(port), _) => parse_port(port).map_err(|e| match e {
            Error::Port { reason, .. } => format!("port {port:?} is {reason}"),
            other => other.to_string(),
        })?,
        (None, Some(default)) => default,
        (None, None) => return Err("there is no port; use host:port".into()),
    };
    let host = Host::parse(host).map_err(|e| e.to_string())?;
    Ok(Authority { host, port })
}

/// Parses one port as written by a person or a client: decimal digits only, 1-65535.
pub fn parse_port(text: &str) -> Result<u16> {
    let refuse = |reason: &str| Error::Port {
        value: text.chars().take(32).collect(),
        reason: reason.into(),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse("not a number; expected 1 to 65535"));
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(refuse("out of range 1-65535")),
        Ok(port) => Ok(port),
    }
}

//! Allowed destination ports: a non-empty set, 443 alone by default.

use std::collections::BTreeSet;
use std::fmt;

use crate::decision::{Denial, Reason};
use crate::error::{Error, Result};

/// The default allowed port: HTTPS.
pub const DEFAULT_PORT: u16 = 443;

/// A non-empty set of allowed ports (1-65535).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSet(BTreeSet<u16>);

impl Default for PortSet {
    /// `{443}`.
    fn default() -> Self {
        PortSet(BTreeSet::from([DEFAULT_PORT]))
    }
}

impl PortSet {
    /// Builds a set from ports; refuses port 0 and an empty set.
    pub fn new(ports: impl IntoIterator<Item = u16>) -> Result<PortSet> {
        let set: BTreeSet<u16> = ports.into_iter().collect();
        if set.contains(&0) {
            return Err(Error::Port {
                value: "0".into(),
                reason: "port 0 cannot be dialed; use 1-65535".into(),
            });
        }
        if set.is_empty() {
            return Err(Error::Port {
                value: String::new(),
                reason:
                    "the port set is empty; name at least one port, or omit it for the default 443"
                        .into(),
            });
        }
        Ok(PortSet(set))
    }

    /// True when the port is in the set.
    pub fn contains(&self, port: u16) -> bool {
        self.0.contains(&port)
    }

    /// The ports in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        self.0.iter().copied()
    }

    /// Allows the port or denies it with `port_not_allowed`.
    pub fn check(&self, port: u16) -> std::result::Result<(), Denial> {
        if self.contains(port) {
            Ok(())
        } else {
            Err(Denial::new(
                Reason::PortNotAllowed,
                format!("port {port} is not in the allowed ports {self}"),
            ))
        }
    }
}

impl fmt::Display for PortSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, port) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{port}")?;
        }
        f.write_str("}")
    }
}

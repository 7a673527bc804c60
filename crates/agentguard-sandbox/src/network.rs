//! The `network` value of a command: no network at all, or the egress proxy as the only way
//! out. Engine networks are never accepted: every one of them (bridge, an internal network,
//! host) reaches more than the proxy.

use crate::error::{Error, Result};

/// The port the relay listens on inside the container unless configured otherwise.
pub const DEFAULT_PROXY_PORT: u16 = 3128;

/// How a command's container reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// No network: only `lo` (the default).
    #[default]
    None,
    /// Only `lo`, and the egress proxy through the relay: the only way out.
    Egress,
}

impl Network {
    /// Parses `none` or `egress`; anything else (an engine network such as `bridge`) is
    /// refused with the reason.
    pub fn parse(value: &str) -> Result<Network> {
        match value {
            "none" => Ok(Network::None),
            "egress" => Ok(Network::Egress),
            _ => Err(Error::Network {
                value: value.to_owned(),
            }),
        }
    }

    /// The config word.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Egress => "egress",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Network;

    #[test]
    fn only_none_and_egress_are_networks() {
        assert_eq!(Network::parse("none").unwrap(), Network::None);
        assert_eq!(Network::parse("egress").unwrap(), Network::Egress);
        for bad in ["bridge", "host", "container:x", "Egress", "", "none "] {
            let message = Network::parse(bad).unwrap_err().to_string();
            assert!(
                message.contains(&format!("{bad:?}")) && message.contains("\"egress\""),
                "{bad}: {message}"
            );
        }
    }
}

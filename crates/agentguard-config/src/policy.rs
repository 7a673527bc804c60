//! Host, port and CIDR lists as the config and the flags give them: each checked at load
//! (an empty port list, a host pattern that does not parse), and made into one
//! `TargetPolicy`.

use agentguard_policy::{TargetPolicy, parse_cidr};
use anyhow::Context;

use crate::error::KeyError;

/// Refuses `KEY = []`: an empty port list would otherwise mean the default, 443.
pub fn check_ports(key: &str, ports: Option<&[u16]>) -> Result<(), KeyError> {
    match ports {
        Some([]) => Err(KeyError::new(
            key,
            "[] (an empty list) allows no port; name at least one (for example [443]) or remove the key for the default, 443",
        )),
        _ => Ok(()),
    }
}

/// Checks each host pattern of `key` at load, so a bad one is refused before anything starts
/// on any target (a local engine or a cluster).
pub(crate) fn check_patterns(key: &str, patterns: &[String]) -> Result<(), KeyError> {
    for pattern in patterns {
        agentguard_policy::HostPattern::parse(pattern)
            .map_err(|e| KeyError::new(key, e.to_string()))?;
    }
    Ok(())
}

/// One validated policy from lists of hosts, ports and CIDRs, as the flags and the config's
/// `[fetch]` table give them; `names` are the words errors carry (the CIDR key, the hosts').
pub fn policy_from(
    hosts: &[String],
    ports: &[u16],
    cidrs: &[String],
    names: (&str, &str),
) -> anyhow::Result<TargetPolicy> {
    let mut builder = TargetPolicy::builder();
    for host in hosts {
        builder = builder.allow(host);
    }
    for port in ports {
        builder = builder.allow_port(*port);
    }
    for cidr in cidrs {
        let net = parse_cidr(cidr).with_context(|| names.0.to_owned())?;
        builder = builder.allow_cidr(net);
    }
    builder.build().with_context(|| names.1.to_owned())
}

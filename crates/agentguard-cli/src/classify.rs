//! `agentguard classify IP...`: the address classifier on the command line. Never dials.
//!
//! Each argument is read the way a URL parser reads a host, so `2130706433` and `0x7f.1` are
//! shown to be loopback, exactly as the fetcher and the proxy would treat them. A host name is
//! not an address and is refused: classification never resolves anything.

use agentguard_policy::{Class, Embedding, Host, classify};
use serde_json::json;

use crate::args::ClassifyArgs;
use crate::exit::{self, Exit};
use crate::output;

pub(crate) fn run(args: &ClassifyArgs) -> anyhow::Result<u8> {
    // Parse every argument first, so a bad one prints nothing rather than half a table.
    let mut parsed = Vec::with_capacity(args.addresses.len());
    for arg in &args.addresses {
        match Host::parse(arg) {
            Ok(Host::Ip(ip)) => parsed.push((arg.as_str(), ip)),
            Ok(Host::Domain(name)) => {
                return Err(Exit::usage(format!(
                    "{arg:?} is not an IP address (it reads as the host name {name}); classify never resolves names"
                ))
                .into());
            }
            Err(err) => {
                return Err(Exit::usage(format!("{arg:?} is not an IP address: {err}")).into());
            }
        }
    }
    let lines = parsed.into_iter().map(|(arg, ip)| {
        let class = classify(ip);
        tracing::debug!(address = %ip, %class, "classified");
        if args.json {
            json_line(arg, ip, &class)
        } else {
            match class {
                Class::Public => format!("{arg}\tpublic"),
                Class::NonPublic { range, .. } => format!("{arg}\tnon-public\t{}", range.name),
            }
        }
    });
    output::write_lines(lines)?;
    Ok(exit::SUCCESS)
}

fn json_line(arg: &str, ip: std::net::IpAddr, class: &Class) -> String {
    let value = match class {
        Class::Public => json!({"address": arg, "ip": ip.to_string(), "class": "public"}),
        Class::NonPublic { range, via } => json!({
            "address": arg,
            "ip": ip.to_string(),
            "class": "non-public",
            "range": range.name,
            "cidr": range.net.to_string(),
            "rfc": range.rfc,
            "ipv4_mapped": via.map(|Embedding::Ipv4Mapped(v4)| v4.to_string()),
        }),
    };
    value.to_string()
}

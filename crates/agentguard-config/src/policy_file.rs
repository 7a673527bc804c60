//! A policy file: the egress allow rules of a shared proxy (`egress-proxy --policy FILE`), an
//! operator's floor (`--floor FILE`), and what `agentguard policy check` compares. Its
//! top-level keys are exactly the `[egress]` table's that grant access (`allow`,
//! `allow_ports`, `allow_cidrs`, `nameservers`), plus `[routes.NAME]` and `[secrets]` as in a
//! run config; any other key is refused. Checked completely at load: every pattern, port,
//! range, route shape and method, so a file that loads is one a proxy can serve.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use agentguard_egress::Route;
use agentguard_policy::{Grant, HostPattern, TargetPolicy, parse_cidr};
use serde::Deserialize;

use crate::error::{ConfigError, KeyError};
use crate::routes::{RouteTable, Routes, SecretSource};

/// The largest policy file read.
const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyTable {
    #[serde(default)]
    allow: Vec<String>,
    allow_ports: Option<Vec<u16>>,
    #[serde(default)]
    allow_cidrs: Vec<String>,
    #[serde(default)]
    nameservers: Vec<String>,
    #[serde(default)]
    routes: BTreeMap<String, RouteTable>,
    #[serde(default)]
    secrets: BTreeMap<String, SecretSource>,
}

/// A loaded policy file.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The SHA-256 of its bytes, in hex.
    pub sha256: String,
    /// What it grants.
    pub grant: Grant,
    /// What CONNECT may reach; `None` when `allow` is empty (a file of routes only).
    pub policy: Option<TargetPolicy>,
    /// Its nameservers; empty for the system's.
    pub nameservers: Vec<SocketAddr>,
    /// Its routes and secrets, shapes checked.
    pub routes: Routes,
}

impl PolicyFile {
    /// Builds every route of the file with its secret read now; a missing secret or a bad
    /// value refuses them all, naming the source, never a value.
    pub fn build_routes(&self) -> Result<Vec<Route>, ConfigError> {
        let all = self.routes.routes.keys().cloned().collect();
        let built = self.routes.build(&all).map_err(|error| ConfigError::Key {
            path: self.path.clone(),
            error,
        })?;
        Ok(built.into_iter().map(|(route, _env)| route).collect())
    }
}

/// Loads and checks the policy file at `path`.
pub fn load_policy(path: &Path) -> Result<PolicyFile, ConfigError> {
    let parse = |message: String| ConfigError::Parse {
        path: path.to_owned(),
        message,
    };
    let read = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    // A regular file only (a FIFO would hang the load, a device never end), and bounded.
    let mut bytes = Vec::new();
    agentguard_audit::open_regular(path)
        .map_err(read)?
        .take(MAX_POLICY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        return Err(parse(format!(
            "is larger than {} KiB; a policy file is a short list of rules",
            MAX_POLICY_BYTES / 1024
        )));
    }
    let text = String::from_utf8(bytes.clone())
        .map_err(|_| parse("is not UTF-8 text; a policy file is TOML".into()))?;
    let table: PolicyTable = toml::from_str(&text).map_err(|e| parse(e.to_string()))?;
    let key = |e: KeyError| parse(e.to_string());
    let grant = grant_of(&table).map_err(key)?;
    let policy = match table.allow.is_empty() {
        true => None,
        false => Some(
            crate::policy_from(
                &table.allow,
                table.allow_ports.as_deref().unwrap_or_default(),
                &table.allow_cidrs,
                ("allow_cidrs", "allow"),
            )
            .map_err(|e| parse(format!("{e:#}")))?,
        ),
    };
    let nameservers = table
        .nameservers
        .iter()
        .map(|server| {
            agentguard_netpin::DnsResolver::parse_nameserver(server)
                .map_err(|e| parse(format!("nameservers: {server:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let folder = path.parent().map(Path::to_owned).unwrap_or_default();
    let routes = Routes::from_file(table.secrets, table.routes, &BTreeMap::new(), |p| {
        folder.join(p)
    })
    .map_err(key)?;
    let mut grant = grant;
    let routed = routes.grant().map_err(key)?;
    grant.cidrs.extend(routed.cidrs);
    grant.routes = routed.routes;
    Ok(PolicyFile {
        path: path.to_owned(),
        sha256: agentguard_audit::sha256_hex(&bytes),
        grant,
        policy,
        nameservers,
        routes,
    })
}

/// What the table grants, every value checked.
fn grant_of(table: &PolicyTable) -> Result<Grant, KeyError> {
    let mut grant = Grant::default();
    for pattern in &table.allow {
        let parsed =
            HostPattern::parse(pattern).map_err(|e| KeyError::new("allow", e.to_string()))?;
        grant.hosts.push(parsed);
    }
    grant.ports = match &table.allow_ports {
        None => BTreeSet::from([agentguard_policy::DEFAULT_PORT]),
        Some(ports) => {
            crate::policy::check_ports("allow_ports", Some(ports))?;
            ports.iter().copied().collect()
        }
    };
    for cidr in &table.allow_cidrs {
        grant
            .cidrs
            .push(parse_cidr(cidr).map_err(|e| KeyError::new("allow_cidrs", e.to_string()))?);
    }
    Ok(grant)
}

#[cfg(test)]
mod tests;

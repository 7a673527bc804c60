//! The operator's floor: a policy file (`policy_file.rs`) naming the largest egress policy any
//! config may grant. A config names one in `[egress] floor`, the operator in `AGENTGUARD_FLOOR`;
//! the config is checked against each at load, for every front end (`run`, `mcp`, the Python
//! package, a cluster's runs), and one that grants anything beyond either is refused before
//! anything starts, each widening entry named (`agentguard_policy::Grant::beyond`).

use std::path::{Path, PathBuf};

use agentguard_egress::Route;
use agentguard_policy::{Grant, TargetPolicy, special_networks};

use crate::egress::Commands;
use crate::error::{ConfigError, KeyError};
use crate::policy_file::load_policy;

/// The operator's floor, whatever the config says.
pub const FLOOR_ENV: &str = "AGENTGUARD_FLOOR";

/// What `commands` grant: every egress policy of the config (its hosts, ports and ranges) and
/// every route it defines (its upstream, methods and ranges).
pub(crate) fn grant_of(commands: &Commands) -> Result<Grant, KeyError> {
    let mut grant = Grant::default();
    for policy in commands.all_policies() {
        add_policy(&mut grant, policy);
    }
    let routes = commands.routes().grant()?;
    grant.cidrs.extend(routes.cidrs);
    grant.routes = routes.routes;
    Ok(grant)
}

fn add_policy(grant: &mut Grant, policy: &TargetPolicy) {
    grant.hosts.extend(policy.hosts.patterns().iter().cloned());
    grant.ports.extend(policy.ports.iter());
    grant
        .cidrs
        .extend(policy.addresses.allowed_cidrs().iter().copied());
}

/// What an `egress-proxy` started with flags grants: its allow rules and its routes.
pub fn proxy_grant(policy: Option<&TargetPolicy>, routes: &[Route]) -> Grant {
    let mut grant = Grant::default();
    if let Some(policy) = policy {
        add_policy(&mut grant, policy);
    }
    for route in routes {
        grant.cidrs.extend(route.allowed_cidrs().iter().copied());
        grant
            .routes
            // A built route's upstream is already canonical; only the trailing `/` goes.
            .entry(route.upstream().trim_end_matches('/').to_owned())
            .or_default()
            .extend(route.methods().into_iter().map(str::to_owned));
    }
    grant
}

/// Refuses `grant` when it goes beyond the floor at `path`, naming each entry; `key` says
/// where the floor was named (`--floor`, `AGENTGUARD_FLOOR`), `who` what was checked
/// (`egress-proxy`).
pub fn check_floor(grant: &Grant, key: &str, path: &Path, who: &str) -> Result<(), ConfigError> {
    within(grant, key, path).map_err(|error| ConfigError::Key {
        path: PathBuf::from(who),
        error,
    })
}

/// Refuses `grant` when it goes beyond the floor at `path`; `key` names where it was set.
fn within(grant: &Grant, key: &str, path: &Path) -> Result<(), KeyError> {
    let floor = load_policy(path).map_err(|e| {
        KeyError::new(
            key,
            format!("the floor {} does not load: {e}", path.display()),
        )
    })?;
    let beyond = grant.beyond(&floor.grant, &special_networks());
    if beyond.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = beyond.iter().map(ToString::to_string).collect();
    Err(KeyError::new(
        key,
        format!(
            "grants what the floor {} does not: {}; narrow it, or ask whoever sets the floor to widen it",
            path.display(),
            named.join(", ")
        ),
    ))
}

/// The floors that apply: `[egress] floor`, then `AGENTGUARD_FLOOR`.
fn floors(commands: &Commands) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if let Some(path) = commands.floor() {
        out.push(("[egress] floor".to_owned(), path.to_owned()));
    }
    if let Some(path) = std::env::var_os(FLOOR_ENV).filter(|p| !p.is_empty()) {
        out.push((FLOOR_ENV.to_owned(), PathBuf::from(path)));
    }
    out
}

/// Refuses `commands` when they grant anything a floor does not, naming each entry.
pub(crate) fn check(commands: &Commands) -> Result<(), KeyError> {
    let floors = floors(commands);
    if floors.is_empty() {
        return Ok(());
    }
    let grant = grant_of(commands)?;
    for (key, path) in floors {
        within(&grant, &key, &path)?;
    }
    Ok(())
}

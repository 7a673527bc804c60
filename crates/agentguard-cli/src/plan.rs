//! From what the logs say a policy lacked (`learn.rs`) to the config changes that would allow
//! it: without a config, everything seen; with one, only what it does not allow yet, as the
//! complete new value of each key (`[commands.NAME] egress_allow`, `[egress] allow` and
//! `allow_ports`, `[routes.NAME] methods` and `paths`). Pure: nothing is read or written here.

use std::collections::BTreeMap;

use agentguard_config::Commands;
use agentguard_policy::{Host, TargetPolicy};
use agentguard_sandbox::Network;

use crate::learn::{Item, Learned, Owner, Seen};

/// The default port of an `[egress]` table without `allow_ports`.
const DEFAULT_PORT: u16 = 443;

/// One value of a key: kept from the config, or added (with when it was seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    pub(crate) seen: Option<Seen>,
}

/// A host, method or path (text), or a port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Value {
    Text(String),
    Port(u16),
}

/// One key to set: its table (`["commands", "install"]`), its name, its complete new value.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) table: Vec<String>,
    pub(crate) key: String,
    pub(crate) entries: Vec<Entry>,
}

/// What to change, what is never suggested, and what the reader should know.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) changes: Vec<Change>,
    pub(crate) never: Vec<(Owner, String, String, Seen)>,
    pub(crate) notes: Vec<String>,
}

/// What one owner (or route) lacked, gathered from the items.
#[derive(Default)]
struct Wants {
    hosts: BTreeMap<Owner, BTreeMap<String, Seen>>,
    ports: BTreeMap<u16, Seen>,
    methods: BTreeMap<String, BTreeMap<String, Seen>>,
    paths: BTreeMap<String, BTreeMap<String, Seen>>,
}

/// The plan for `learned` (only `command`'s runs when given), against `config` when given.
pub(crate) fn plan(
    learned: &Learned,
    command: Option<&str>,
    config: Option<&Commands>,
    wildcards: bool,
) -> Plan {
    let mut plan = Plan::default();
    let mut wants = Wants::default();
    // A name that once resolved to a non-public address is never suggested, for anyone.
    let never_hosts: std::collections::BTreeSet<&str> = learned
        .items
        .keys()
        .filter_map(|(_, item)| match item {
            Item::Never(target, _) => target.rsplit_once(':').map(|(host, _)| host),
            _ => None,
        })
        .collect();
    for ((owner, item), seen) in &learned.items {
        if command.is_some_and(|c| owner.as_deref() != Some(c)) {
            continue;
        }
        if let Some(commands) = config
            && let Some(name) = owner
            && commands.network_of(name) != Network::Egress
        {
            plan.notes.push(format!(
                "command {name} has network = \"none\" (or is not in the config): its logged requests are from another config; skipped"
            ));
            continue;
        }
        match item {
            Item::Target(host, _) if never_hosts.contains(host.as_str()) => {}
            Item::Target(host, port) => {
                let policy = config.and_then(|c| owner_policy(c, owner.as_deref()));
                if !host_allowed(policy, host) {
                    let hosts = wants.hosts.entry(owner.clone()).or_default();
                    hosts.entry(host.clone()).or_default().add(seen);
                }
                let port_ok = match config {
                    Some(c) => port_allowed(c, *port),
                    None => *port == DEFAULT_PORT,
                };
                if !port_ok {
                    wants.ports.entry(*port).or_default().add(seen);
                }
            }
            Item::Method(route, method) => {
                let methods = wants.methods.entry(route.clone()).or_default();
                methods.entry(method.clone()).or_default().add(seen);
            }
            Item::Path(route, path) => {
                let paths = wants.paths.entry(route.clone()).or_default();
                paths.entry(path.clone()).or_default().add(seen);
            }
            Item::Never(target, reason) => {
                plan.never
                    .push((owner.clone(), target.clone(), reason.clone(), seen.clone()));
            }
        }
    }
    plan.notes.dedup();
    for run in &learned.orphans {
        plan.notes.push(format!(
            "run {run}: its container_run event is not in these logs, so its command is unknown; skipped"
        ));
    }
    route_changes(&mut plan, &wants, config);
    host_changes(&mut plan, wants.hosts, config, wildcards);
    port_change(&mut plan, wants.ports, config);
    plan
}

/// The hosts an owner may reach today: a command's own list or the shared one.
fn owner_policy<'a>(commands: &'a Commands, owner: Option<&str>) -> Option<&'a TargetPolicy> {
    match owner {
        Some(name) => commands.policy_of(name),
        None => commands.shared_policy(),
    }
}

fn host_allowed(policy: Option<&TargetPolicy>, host: &str) -> bool {
    let Ok(host) = Host::parse(host) else {
        return false;
    };
    policy.is_some_and(|p| p.hosts.check(&host).is_ok())
}

fn port_allowed(commands: &Commands, port: u16) -> bool {
    commands
        .allow_ports()
        .unwrap_or(&[DEFAULT_PORT])
        .contains(&port)
}

/// `egress_allow` of each command (or `[egress] allow`): what it has plus what it lacked.
fn host_changes(
    plan: &mut Plan,
    hosts: BTreeMap<Owner, BTreeMap<String, Seen>>,
    config: Option<&Commands>,
    wildcards: bool,
) {
    for (owner, added) in hosts {
        let added = if wildcards {
            merge_siblings(added)
        } else {
            added
        };
        let kept: Vec<String> = config
            .and_then(|c| owner_policy(c, owner.as_deref()))
            .map(|p| p.hosts.patterns().iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        let (table, key) = match &owner {
            Some(name) => (vec!["commands".to_owned(), name.clone()], "egress_allow"),
            None => (vec!["egress".to_owned()], "allow"),
        };
        if let (Some(commands), Some(name)) = (config, &owner)
            && !commands.has_own_allow(name)
            && !kept.is_empty()
        {
            plan.notes.push(format!(
                "command {name} used [egress] allow; its own egress_allow keeps those hosts and adds the new ones for it alone"
            ));
        }
        plan.changes.push(Change {
            table,
            key: key.to_owned(),
            entries: entries(kept.into_iter().map(Value::Text), added, Value::Text),
        });
    }
}

/// `[egress] allow_ports`: what it has (443 when absent) plus the ports seen beyond it.
fn port_change(plan: &mut Plan, ports: BTreeMap<u16, Seen>, config: Option<&Commands>) {
    if ports.is_empty() {
        return;
    }
    let kept: Vec<u16> = match config {
        Some(c) => c.allow_ports().unwrap_or(&[DEFAULT_PORT]).to_vec(),
        None => vec![DEFAULT_PORT],
    };
    plan.changes.push(Change {
        table: vec!["egress".to_owned()],
        key: "allow_ports".to_owned(),
        entries: entries(kept.into_iter().map(Value::Port), ports, Value::Port),
    });
}

/// `[routes.NAME] methods` and `paths`: what a route has plus what its requests lacked.
fn route_changes(plan: &mut Plan, wants: &Wants, config: Option<&Commands>) {
    let defaults = || {
        agentguard_egress::DEFAULT_ROUTE_METHODS
            .iter()
            .map(|m| (*m).to_owned())
            .collect::<Vec<_>>()
    };
    for (route, seen) in &wants.methods {
        let rules = config.map(|c| c.routes().rules(route));
        if rules == Some(None) {
            plan.notes
                .push(format!("route {route} is not in the config; skipped"));
            continue;
        }
        let kept = match rules.flatten() {
            Some((methods, _)) if !methods.is_empty() => methods.to_vec(),
            _ => defaults(),
        };
        let added: BTreeMap<String, Seen> = seen
            .iter()
            .filter(|(m, _)| !kept.contains(m))
            .map(|(m, s)| (m.clone(), s.clone()))
            .collect();
        if !added.is_empty() {
            plan.changes
                .push(route_change(route, "methods", kept, added));
        }
    }
    for (route, seen) in &wants.paths {
        let kept = match config.and_then(|c| c.routes().rules(route)) {
            // No `paths`: every path is allowed already.
            Some((_, [])) => continue,
            Some((_, paths)) => paths.to_vec(),
            None if config.is_some() => continue,
            None => Vec::new(),
        };
        let added: BTreeMap<String, Seen> = seen
            .iter()
            .filter(|(p, _)| !agentguard_egress::path_allowed(&kept, p))
            .map(|(p, s)| (p.clone(), s.clone()))
            .collect();
        if !added.is_empty() {
            plan.changes.push(route_change(route, "paths", kept, added));
        }
    }
}

fn route_change(
    route: &str,
    key: &str,
    kept: Vec<String>,
    added: BTreeMap<String, Seen>,
) -> Change {
    Change {
        table: vec!["routes".to_owned(), route.to_owned()],
        key: key.to_owned(),
        entries: entries(kept.into_iter().map(Value::Text), added, Value::Text),
    }
}

/// The kept values, then the added ones (most seen first), none twice.
fn entries<K: Ord + Clone>(
    kept: impl Iterator<Item = Value>,
    added: BTreeMap<K, Seen>,
    value: impl Fn(K) -> Value,
) -> Vec<Entry> {
    let mut out: Vec<Entry> = kept.map(|value| Entry { value, seen: None }).collect();
    let mut added: Vec<(K, Seen)> = added.into_iter().collect();
    added.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(&b.0)));
    for (key, seen) in added {
        let value = value(key);
        if !out.iter().any(|e| e.value == value) {
            out.push(Entry {
                value,
                seen: Some(seen),
            });
        }
    }
    out
}

/// `--wildcards`: 3 or more new hosts under one parent of at least two labels become
/// `*.parent` (which matches its subdomains, never the parent itself).
fn merge_siblings(hosts: BTreeMap<String, Seen>) -> BTreeMap<String, Seen> {
    let parent = |host: &str| {
        host.split_once('.')
            .map(|(_, rest)| rest.to_owned())
            .filter(|rest| rest.contains('.'))
    };
    let mut families: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for host in hosts.keys() {
        if let Some(parent) = parent(host) {
            families.entry(parent).or_default().push(host.clone());
        }
    }
    let mut out = hosts.clone();
    for (parent, members) in families.into_iter().filter(|(_, m)| m.len() >= 3) {
        let mut seen = Seen::default();
        for member in &members {
            if let Some(s) = out.remove(member) {
                seen.add(&s);
            }
        }
        out.insert(format!("*.{parent}"), seen);
    }
    out
}

#[cfg(test)]
mod tests;

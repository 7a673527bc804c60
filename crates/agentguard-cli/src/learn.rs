//! What verified audit logs say a policy lacked, for `agentguard policy suggest`: each
//! command's refused and observed CONNECT targets and route requests, counted exactly
//! (`repeated` included), and the targets that must never be suggested.
//!
//! A log is read only as far as it verifies; one that does not verify is refused whole, since
//! a forged line could otherwise become an allowlist entry. A proxy event names its run
//! (`subject.run`); the run's `container_run` event (`data.container`, written when the run
//! ends) names its command, so the logs are read to the end before anything is attributed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufReader;
use std::path::PathBuf;

use agentguard_audit::{Decision, Key, Kind, Reader, Record};
use agentguard_policy::{Authority, Host};
use anyhow::Context;

use crate::exit::Exit;

/// How often something was seen, and when last (the record's `ts`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) count: u64,
    pub(crate) last: String,
}

impl Seen {
    pub(crate) fn add(&mut self, other: &Seen) {
        self.count += other.count;
        if other.last > self.last {
            self.last.clone_from(&other.last);
        }
    }
}

/// Whose policy lacked it: a command by name, or (a standalone proxy's log, whose events
/// name no run) the `[egress]` table.
pub(crate) type Owner = Option<String>;

/// One thing a policy lacked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Item {
    /// A CONNECT to a host name and port.
    Target(String, u16),
    /// A route request's method.
    Method(String, String),
    /// A route request's path.
    Path(String, String),
    /// Never suggested: the target (or route path) and why.
    Never(String, String),
}

/// What the logs say, by owner.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    pub(crate) items: BTreeMap<(Owner, Item), Seen>,
    /// Runs with proxy events but no `container_run` event in these logs.
    pub(crate) orphans: BTreeSet<String>,
    /// Records verified, over every log.
    pub(crate) events: u64,
}

/// Reads and verifies every log, then attributes each run's items to its command.
pub(crate) fn read(logs: &[PathBuf], key: Option<&Key>) -> anyhow::Result<Learned> {
    let mut by_run: BTreeMap<(Option<String>, Item), Seen> = BTreeMap::new();
    let mut commands: BTreeMap<String, String> = BTreeMap::new();
    let mut events = 0;
    for log in logs {
        let file = agentguard_audit::open_regular(log)
            .with_context(|| format!("opening audit log {}", log.display()))?;
        let mut reader = Reader::new(BufReader::new(file), key.cloned());
        for item in reader.by_ref() {
            let record = item.map_err(|problem| {
                Exit::failure(format!(
                    "{}: {problem}; policy suggest reads only logs that verify from the first line to the last (see `agentguard audit verify`), so nothing was suggested",
                    log.display()
                ))
            })?;
            if record.kind == Kind::ContainerRun
                && let (Some(run), Some(command)) =
                    (text(&record, "container"), text(&record, "command"))
            {
                commands.insert(run.to_owned(), command.to_owned());
            }
            let run = text(&record, "run").map(str::to_owned);
            let seen = Seen {
                count: record
                    .data
                    .get("repeated")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(1),
                last: record.ts.clone(),
            };
            for item in items(&record) {
                by_run.entry((run.clone(), item)).or_default().add(&seen);
            }
        }
        events += reader.summary().events;
    }
    let mut learned = Learned {
        events,
        ..Learned::default()
    };
    for ((run, item), seen) in by_run {
        let owner = match run {
            None => None,
            Some(run) => match commands.get(&run) {
                Some(command) => Some(command.clone()),
                None => {
                    learned.orphans.insert(run);
                    continue;
                }
            },
        };
        learned.items.entry((owner, item)).or_default().add(&seen);
    }
    Ok(learned)
}

/// A field of the subject (or, failing that, the data) as text.
fn text<'a>(record: &'a Record, key: &str) -> Option<&'a str> {
    record
        .subject
        .get(key)
        .or_else(|| record.data.get(key))
        .and_then(|v| v.as_str())
}

/// What one record says the policy lacked (nothing for most records).
fn items(record: &Record) -> Vec<Item> {
    let reason = record.reason.as_str();
    match record.kind {
        Kind::EgressConnect => {
            let Some(target) = text(record, "target") else {
                // A summary past the run's cap names no target: nothing to suggest from it.
                return Vec::new();
            };
            match (record.decision, reason) {
                (Decision::Allow, "observed")
                | (Decision::Deny, "domain_not_allowed" | "port_not_allowed") => {
                    vec![connect_item(target)]
                }
                (Decision::Deny, "non_public_address" | "ip_literal_not_allowed") => {
                    vec![Item::Never(target.to_owned(), reason.to_owned())]
                }
                _ => Vec::new(),
            }
        }
        Kind::EgressRoute => {
            let (Some(route), Some(path)) = (text(record, "route"), text(record, "path")) else {
                return Vec::new();
            };
            let method = record.data.get("method").and_then(|v| v.as_str());
            let mut out = Vec::new();
            let observed = record.decision == Decision::Allow && reason == "observed";
            if let Some(method) = method
                && (observed
                    || (record.decision == Decision::Deny && reason == "method_not_allowed"))
            {
                out.push(Item::Method(route.to_owned(), method.to_owned()));
            }
            if observed || (record.decision == Decision::Deny && reason == "path_not_allowed") {
                out.push(path_item(route, path));
            }
            out
        }
        _ => Vec::new(),
    }
}

/// A CONNECT target as something to allow, or why it never will be.
fn connect_item(target: &str) -> Item {
    match Authority::parse(target, None) {
        Ok(Authority {
            host: Host::Domain(name),
            port,
        }) => Item::Target(name.to_string(), port),
        Ok(_) => Item::Never(target.to_owned(), "ip_literal_not_allowed".to_owned()),
        Err(_) => Item::Never(target.to_owned(), "malformed_target".to_owned()),
    }
}

/// A route path as a `paths` entry, or why it cannot be one (written by hand instead).
fn path_item(route: &str, path: &str) -> Item {
    match agentguard_egress::check_path_prefix(path) {
        Ok(()) if !path.contains(';') => Item::Path(route.to_owned(), path.to_owned()),
        _ => Item::Never(
            format!("route {route} {path}"),
            "path_not_plain: write a prefix for it by hand".to_owned(),
        ),
    }
}

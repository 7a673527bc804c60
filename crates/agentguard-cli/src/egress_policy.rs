//! `egress-proxy --policy FILE`: the proxy's rules from a policy file, and their reloads on
//! SIGHUP and, with `--watch`, when the file changes.
//!
//! A load reads and checks the whole file (`agentguard_config::load_policy`), checks it
//! against the floor, builds its routes (secrets read now) and its resolver, and only then
//! hands the proxy the new rules (`EgressProxy::reload`), which records `policy_loaded` with
//! the new generation, the file's SHA-256 and what was added and removed, and revokes what the
//! new rules refuse. A load that fails at any step leaves the generation in place and records
//! `policy_loaded` with the reason (`load_failed` or `beyond_floor`), the message and the
//! generation kept.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentguard_audit::{Decision, Event};
use agentguard_config::{PolicyFile, load_policy};
use agentguard_egress::{EgressProxy, ProxyRules};
use agentguard_netpin::{DnsResolver, Resolve};
use agentguard_policy::{Grant, special_networks};

/// A policy file's state as `stat` gives it: a change of any part is a change of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        device: meta.dev(),
        inode: meta.ino(),
        size: meta.size(),
        modified: (meta.mtime(), meta.mtime_nsec()),
    })
}

/// A load that did not take: the reason code of its event, and why.
pub(crate) struct Refused {
    pub(crate) reason: &'static str,
    pub(crate) error: anyhow::Error,
}

impl Refused {
    fn load(error: impl Into<anyhow::Error>) -> Refused {
        Refused {
            reason: "load_failed",
            error: error.into(),
        }
    }
}

/// A load that took: the rules and their `policy_loaded` event (its generation still to
/// add), and what [`Source`] keeps once the proxy has them.
struct Loaded {
    rules: ProxyRules,
    event: Event,
    kept: Kept,
}

/// What a generation in place leaves in [`Source`] for the next load.
struct Kept {
    grant: Grant,
    nameservers: Vec<SocketAddr>,
    stamp: Option<Stamp>,
}

/// The policy file a proxy serves, and what the generation in place grants.
pub(crate) struct Source {
    path: PathBuf,
    floor: Option<PathBuf>,
    current: Grant,
    /// The nameservers of the generation in place: a reload that keeps them keeps the resolver
    /// (and its cache) too. `None` before the first load.
    nameservers: Option<Vec<SocketAddr>>,
    /// The file as last loaded, and as seen at the last check (for `--watch`).
    loaded: Option<Stamp>,
    seen: Option<Stamp>,
}

impl Source {
    /// Loads `path` for the proxy's start: its rules, and the `policy_loaded` event the proxy
    /// records with generation 1. Must be called inside the async runtime (the resolver).
    pub(crate) fn start(
        path: &Path,
        floor: Option<&Path>,
    ) -> Result<(Source, ProxyRules, Event), Refused> {
        let mut source = Source {
            path: path.to_owned(),
            floor: floor.map(Path::to_owned),
            current: Grant::default(),
            nameservers: None,
            loaded: None,
            seen: None,
        };
        let Loaded { rules, event, kept } = source.load("start")?;
        source.keep(kept);
        Ok((source, rules, event))
    }

    /// Loads and checks the file; `trigger` is its event's reason. Changes nothing.
    fn load(&self, trigger: &str) -> Result<Loaded, Refused> {
        let stamp = stamp(&self.path);
        let file = load_policy(&self.path).map_err(Refused::load)?;
        if let Some(floor) = &self.floor {
            agentguard_config::check_floor(&file.grant, "--floor", floor, "--policy").map_err(
                |e| Refused {
                    reason: "beyond_floor",
                    error: e.into(),
                },
            )?;
        }
        let same = self.nameservers.as_ref() == Some(&file.nameservers);
        let rules = rules(&file, same).map_err(Refused::load)?;
        let special = special_networks();
        let named = |grant: &Grant, other: &Grant| -> Vec<String> {
            let entries = grant.beyond(other, &special);
            entries.iter().map(ToString::to_string).collect()
        };
        let event = Event::policy_loaded(Decision::Allow, trigger, &self.path.to_string_lossy())
            .data("sha256", file.sha256.as_str())
            .data("added", named(&file.grant, &self.current))
            .data("removed", named(&self.current, &file.grant));
        Ok(Loaded {
            rules,
            event,
            kept: Kept {
                grant: file.grant,
                nameservers: file.nameservers,
                stamp,
            },
        })
    }

    /// Takes `kept` as the generation in place, once the proxy has its rules.
    fn keep(&mut self, kept: Kept) {
        self.current = kept.grant;
        self.nameservers = Some(kept.nameservers);
        self.loaded = kept.stamp;
        self.seen = kept.stamp;
    }

    /// Loads the file again and puts it in place on `proxy`; `trigger` (`signal`, `watch`) is
    /// the event's reason. A load that fails is recorded and leaves the proxy as it was.
    pub(crate) async fn reload(&mut self, proxy: &EgressProxy, trigger: &str) {
        let refused = match self.load(trigger) {
            Ok(Loaded { rules, event, kept }) => match proxy.reload(rules, event).await {
                Ok(done) => {
                    self.keep(kept);
                    tracing::info!(generation = done.generation, revoked = done.revoked, path = %self.path.display(), "policy file loaded");
                    return;
                }
                Err(e) => Refused::load(e),
            },
            Err(refused) => refused,
        };
        let message = format!("{:#}", refused.error);
        let event = Event::policy_loaded(
            Decision::Error,
            refused.reason,
            &self.path.to_string_lossy(),
        )
        .data("message", message.as_str())
        .data("generation", proxy.generation());
        proxy.record(event).await;
        tracing::error!(path = %self.path.display(), error = %message, "policy file not loaded; the rules in place stay");
    }

    /// Whether the file has changed since it was loaded and stayed the same since the last
    /// check (so a file still being written is not loaded half done).
    pub(crate) fn settled_change(&mut self) -> bool {
        let now = stamp(&self.path);
        let settled = now == self.seen && now != self.loaded && now.is_some();
        self.seen = now;
        if settled {
            // Seen once: not again until it changes, whether or not it loads.
            self.loaded = now;
        }
        settled
    }
}

/// The proxy's rules from a loaded file: its policy, its routes with their secrets read now,
/// and its resolver (the system's when it names no nameserver); `None` to keep the one in
/// place when the nameservers are the same (`same`).
fn rules(file: &PolicyFile, same: bool) -> anyhow::Result<ProxyRules> {
    let routes = file.build_routes()?.into_iter().map(Arc::new).collect();
    let resolver: Option<Arc<dyn Resolve>> = match (same, file.nameservers.is_empty()) {
        (true, _) => None,
        (false, true) => Some(Arc::new(DnsResolver::system()?)),
        (false, false) => Some(Arc::new(DnsResolver::with_nameservers(&file.nameservers)?)),
    };
    Ok(ProxyRules {
        policy: file.policy.clone(),
        routes,
        resolver,
    })
}

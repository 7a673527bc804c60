//! The rules a proxy decides by, and what they let open: a reload replaces the rules at once
//! and, under the same lock, revokes every open connection the new rules refuse.
//!
//! Each connection takes one snapshot of the rules (`Rules`, with its generation) when its head
//! is read and decides everything by it. Once allowed, it registers what it reaches (`Reach`)
//! with its `Watch`; a connection decided under an older generation than the current one is
//! checked against the current rules as it registers, so none slips between a decision and a
//! reload. A revoked connection's watch is cancelled and remembers why, so its close event says
//! `policy_revoked` instead of `shutdown`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agentguard_netpin::{DnsResolver, Resolve};
use agentguard_policy::{Host, TargetPolicy};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::route::Route;
use crate::route_target::path_allowed;

/// One generation of allow rules.
pub(crate) struct Rules {
    /// 1 at start, one more at each reload.
    pub(crate) generation: u64,
    /// What CONNECT may reach; `None` when the proxy serves only routes.
    pub(crate) policy: Option<TargetPolicy>,
    /// The credential routes granted, by name.
    pub(crate) routes: BTreeMap<String, Arc<Route>>,
    pub(crate) resolver: Arc<dyn Resolve>,
}

/// The allow rules a proxy starts with or reloads: what CONNECT may reach, the credential
/// routes, and the resolver names are pinned through.
#[derive(Default)]
pub struct ProxyRules {
    /// What CONNECT may reach; `None` when the proxy serves only routes.
    pub policy: Option<TargetPolicy>,
    /// The credential routes, each name once.
    pub routes: Vec<Arc<Route>>,
    /// The resolver; `None` keeps the proxy's (on a reload) or takes the system's (at start).
    pub resolver: Option<Arc<dyn Resolve>>,
}

impl ProxyRules {
    /// The rules checked: a policy or a route (an empty allowlist never means "allow
    /// everything"), each route named once; `resolver` when they name none.
    pub(crate) fn into_rules(self, resolver: Option<&Arc<dyn Resolve>>) -> Result<Rules> {
        if self.policy.is_none() && self.routes.is_empty() {
            return Err(agentguard_policy::Error::EmptyHostAllowlist.into());
        }
        let mut routes = BTreeMap::new();
        for route in self.routes {
            let name = route.name.clone();
            if routes.insert(name.clone(), route).is_some() {
                return Err(Error::Route {
                    route: name,
                    message: "the route is given twice".into(),
                });
            }
        }
        let resolver = match (self.resolver, resolver) {
            (Some(own), _) => own,
            (None, Some(current)) => Arc::clone(current),
            (None, None) => Arc::new(DnsResolver::system()?),
        };
        Ok(Rules {
            generation: 1,
            policy: self.policy,
            routes,
            resolver,
        })
    }
}

/// What an open connection reaches, checked again at each reload.
pub(crate) enum Reach {
    /// A tunnel to `host:port`, at the addresses its name was pinned to.
    Tunnel {
        host: Host,
        port: u16,
        addresses: Vec<std::net::IpAddr>,
    },
    /// A request through a route.
    Route {
        name: String,
        upstream: String,
        method: http::Method,
        path: String,
    },
    /// Let through by an observe run: never revoked (an observe proxy is never reloaded).
    Observed,
}

impl Reach {
    /// True when `rules` still allow it.
    fn allowed_by(&self, rules: &Rules) -> bool {
        match self {
            Reach::Tunnel {
                host,
                port,
                addresses,
            } => rules.policy.as_ref().is_some_and(|policy| {
                policy.check_target(host, *port).is_ok()
                    && policy.addresses.check_all(addresses).is_ok()
            }),
            Reach::Route {
                name,
                upstream,
                method,
                path,
            } => rules.routes.get(name).is_some_and(|route| {
                route.upstream() == *upstream
                    && route.methods.contains(method)
                    && path_allowed(&route.paths, path)
            }),
            Reach::Observed => true,
        }
    }
}

/// A connection's stop signal: the proxy's shutdown, or its own revocation.
#[derive(Clone)]
pub(crate) struct Watch {
    pub(crate) token: CancellationToken,
    revoked: Arc<AtomicBool>,
}

impl Watch {
    /// A watch cancelled with `shutdown` too.
    pub(crate) fn under(shutdown: &CancellationToken) -> Watch {
        Watch {
            token: shutdown.child_token(),
            revoked: Arc::new(AtomicBool::new(false)),
        }
    }

    fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        self.token.cancel();
    }

    /// The close reason for a connection stopped with `reason`: `policy_revoked` in the place
    /// of `shutdown` when a reload revoked it.
    pub(crate) fn reason(&self, reason: &'static str) -> &'static str {
        if reason == "shutdown" && self.revoked.load(Ordering::SeqCst) {
            "policy_revoked"
        } else {
            reason
        }
    }
}

struct Open {
    reach: Reach,
    watch: Watch,
}

struct State {
    rules: Arc<Rules>,
    open: HashMap<u64, Open>,
    next: u64,
}

/// The current rules and the open connections.
pub(crate) struct Live {
    state: Mutex<State>,
}

/// An open connection's place in the registry; leaving drops it.
pub(crate) struct Registered {
    live: Arc<Live>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.live.lock().open.remove(&self.id);
    }
}

impl Live {
    pub(crate) fn new(rules: Rules) -> Arc<Live> {
        Arc::new(Live {
            state: Mutex::new(State {
                rules: Arc::new(rules),
                open: HashMap::new(),
                next: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current rules.
    pub(crate) fn rules(&self) -> Arc<Rules> {
        Arc::clone(&self.lock().rules)
    }

    /// Registers an allowed connection decided under `generation`; when the rules changed since
    /// and refuse it, it is revoked at once.
    pub(crate) fn register(
        self: &Arc<Self>,
        reach: Reach,
        generation: u64,
        watch: &Watch,
    ) -> Registered {
        let mut state = self.lock();
        if state.rules.generation != generation && !reach.allowed_by(&state.rules) {
            watch.revoke();
        }
        let id = state.next;
        state.next += 1;
        let watch = watch.clone();
        state.open.insert(id, Open { reach, watch });
        Registered {
            live: Arc::clone(self),
            id,
        }
    }

    /// Replaces the rules (their generation the next one) and revokes every open connection they
    /// refuse; returns the generation and how many were revoked.
    pub(crate) fn replace(&self, mut rules: Rules) -> (u64, usize) {
        let mut state = self.lock();
        rules.generation = state.rules.generation + 1;
        let mut revoked = 0;
        for open in state.open.values() {
            if !open.watch.revoked.load(Ordering::SeqCst) && !open.reach.allowed_by(&rules) {
                open.watch.revoke();
                revoked += 1;
            }
        }
        let generation = rules.generation;
        state.rules = Arc::new(rules);
        (generation, revoked)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use agentguard_policy::parse_cidr;

    use super::*;

    const UPSTREAM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

    fn rules(hosts: &[&str]) -> Rules {
        let policy = hosts
            .iter()
            .fold(
                TargetPolicy::builder()
                    .allow_port(443)
                    .allow_cidr(parse_cidr("127.0.0.2/32").unwrap()),
                |policy, host| policy.allow(*host),
            )
            .build()
            .unwrap();
        let resolver: Arc<dyn Resolve> =
            Arc::new(DnsResolver::with_nameservers(&["127.0.0.1:53".parse().unwrap()]).unwrap());
        ProxyRules {
            policy: Some(policy),
            ..ProxyRules::default()
        }
        .into_rules(Some(&resolver))
        .unwrap()
    }

    fn tunnel(host: &str) -> Reach {
        Reach::Tunnel {
            host: Host::parse(host).unwrap(),
            port: 443,
            addresses: vec![UPSTREAM],
        }
    }

    fn watch() -> Watch {
        Watch::under(&CancellationToken::new())
    }

    #[test]
    fn a_connection_decided_before_a_reload_is_checked_as_it_registers() {
        let live = Live::new(rules(&["a.example.test", "b.example.test"]));
        let decided = live.rules().generation;
        let (generation, revoked) = live.replace(rules(&["a.example.test"]));
        assert_eq!((generation, revoked), (2, 0));
        // Decided under generation 1, registered under 2: the refused one is revoked at once.
        let (kept, cut) = (watch(), watch());
        let _kept = live.register(tunnel("a.example.test"), decided, &kept);
        let _cut = live.register(tunnel("b.example.test"), decided, &cut);
        assert!(!kept.token.is_cancelled());
        assert!(cut.token.is_cancelled());
        assert_eq!(cut.reason("shutdown"), "policy_revoked");
        assert_eq!(kept.reason("shutdown"), "shutdown");
    }

    #[test]
    fn a_reload_counts_each_open_connection_once_and_forgets_the_closed() {
        let live = Live::new(rules(&["a.example.test", "b.example.test"]));
        let (one, two) = (watch(), watch());
        let one_registered = live.register(tunnel("b.example.test"), 1, &one);
        let two_registered = live.register(tunnel("b.example.test"), 1, &two);
        drop(two_registered);
        assert_eq!(live.replace(rules(&["a.example.test"])), (2, 1));
        assert!(one.token.is_cancelled() && !two.token.is_cancelled());
        // Already revoked: not counted again.
        assert_eq!(live.replace(rules(&["c.example.test"])), (3, 0));
        drop(one_registered);
        // A wider reload revokes nothing.
        let wide = watch();
        let _wide = live.register(tunnel("a.example.test"), 3, &wide);
        assert_eq!(
            live.replace(rules(&["a.example.test", "c.example.test"])),
            (4, 0)
        );
        assert!(!wide.token.is_cancelled());
    }
}

//! `agentguard doctor --config FILE`: what one local config needs, each a finding with its
//! fix. The config loads; a trivial hardened run of its image; the image is present and its
//! pin; each command's program is in the image (`agentguard_container::checkup`); each egress
//! name resolves through the configured nameservers to addresses the run's own policy would
//! dial (the egress proxy's one `pin`); each secret is present (never its value); each
//! `writable` and `hidden` entry is as a run would find it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentguard_container::checkup;
use agentguard_container::doctor::{self, Finding, Level};
use agentguard_netpin::{DEFAULT_MAX_ANSWERS, DnsResolver, Resolve};
use agentguard_policy::{HostPattern, TargetPolicy};
use agentguard_sandbox::Network;

use crate::config::{self, RunConfig};

/// How long one egress name's lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Every check of a loaded local config, in the order a first run meets them.
pub(crate) async fn config(path: &Path, config: &RunConfig) -> Vec<Finding> {
    let names: Vec<&str> = config.spec.commands().names().collect();
    let mut findings = vec![ok(format!(
        "{} loads: {} command(s): {}",
        path.display(),
        names.len(),
        names.join(", ")
    ))];
    let image = checkup::image(&config.spec).await;
    let image_missing = image.level == Level::Fail;
    findings.push(image);
    if image_missing {
        findings.push(Finding {
            level: Level::Warn,
            what: "each command's program was not looked up: the image is not there".into(),
            fix: "fix the image first, then run doctor again".into(),
        });
    } else {
        // engine = "oci" runs the relay as each sandbox's init: these runs take it too.
        let relay = match config.spec.engine().kind {
            agentguard_container::EngineKind::Oci => match relay_copy() {
                Ok(copy) => Some(copy),
                Err(e) => {
                    findings.push(Finding {
                        level: Level::Fail,
                        what: format!("the relay could not be copied for the trial runs: {e:#}"),
                        fix: "check the runs folder (AGENTGUARD_RUN_DIR) and the relay".into(),
                    });
                    return findings;
                }
            },
            _ => None,
        };
        let program = relay.as_ref().map(|(_, path)| path.as_path());
        findings.push(doctor::trial_run(&config.spec, program).await);
        findings.extend(checkup::programs(&config.spec, program).await);
    }
    findings.extend(egress_names(config).await);
    findings.extend(secrets(config.commands.routes()));
    findings.extend(checkup::paths(&config.spec));
    findings
}

/// The relay, copied into a private folder of its own for doctor's runs (removed on drop).
fn relay_copy() -> anyhow::Result<(tempfile::TempDir, std::path::PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("agentguard-doctor-")
        .tempdir()?;
    let program = match std::env::var_os(config::RELAY_ENV).filter(|p| !p.is_empty()) {
        Some(path) => agentguard_sandbox::relay::RelayProgram::from_file(Path::new(&path))?,
        None => agentguard_sandbox::relay::RelayProgram::embedded()?,
    };
    let path = program.install(&dir.path().join("relay"))?;
    Ok((dir, path))
}

fn ok(what: String) -> Finding {
    Finding {
        level: Level::Ok,
        what,
        fix: String::new(),
    }
}

/// Each `[secrets]` entry: present and usable, or what is wrong (never its value).
fn secrets(routes: &config::Routes) -> Vec<Finding> {
    routes
        .check_secrets()
        .into_iter()
        .map(|(name, source, problem)| match problem {
            None => ok(format!("secret {name:?} ({source}) is present")),
            Some(problem) => Finding {
                level: Level::Fail,
                what: problem,
                fix: format!("provide {source} before agentguard starts: runs with a route using {name:?} are refused until then"),
            },
        })
        .collect()
}

/// Each name an egress command may reach, resolved once through the proxy's resolver and
/// checked against that command's address policy, as the proxy does before every dial.
async fn egress_names(config: &RunConfig) -> Vec<Finding> {
    // Each pattern once, with the first command's policy that allows it and who allows it.
    let mut patterns: BTreeMap<String, (HostPattern, &TargetPolicy, Vec<&str>)> = BTreeMap::new();
    for name in config.spec.commands().names() {
        if config.commands.network_of(name) != Network::Egress {
            continue;
        }
        let Some(policy) = config.commands.policy_of(name) else {
            continue;
        };
        for pattern in policy.hosts.patterns() {
            patterns
                .entry(pattern.to_string())
                .or_insert_with(|| (pattern.clone(), policy, Vec::new()))
                .2
                .push(name);
        }
    }
    if patterns.is_empty() {
        return Vec::new();
    }
    let servers = config.commands.nameservers();
    let (resolver, through) = if servers.is_empty() {
        (DnsResolver::system(), "the system resolver".to_owned())
    } else {
        let shown: Vec<String> = servers.iter().map(ToString::to_string).collect();
        (
            DnsResolver::with_nameservers(servers),
            format!("[egress] nameservers ({})", shown.join(", ")),
        )
    };
    let resolver: Arc<dyn Resolve> = match resolver {
        Ok(resolver) => Arc::new(resolver),
        Err(e) => {
            return vec![Finding {
                level: Level::Fail,
                what: format!("the egress proxy's resolver ({through}) cannot be made: {e}"),
                fix: "fix [egress] nameservers, or /etc/resolv.conf".into(),
            }];
        }
    };
    let mut findings = Vec::new();
    for (shown, (pattern, policy, commands)) in patterns {
        let who = commands.join(", ");
        let finding = match pattern {
            HostPattern::AnyName => Finding {
                level: Level::Warn,
                what: format!("egress `*` ({who}) lets a run reach any public name"),
                fix: "list the hosts the command needs (`agentguard run --observe` and `policy suggest` find them)".into(),
            },
            HostPattern::Subdomains(_) => ok(format!(
                "egress {shown} ({who}) is a wildcard: each name under it is resolved and checked when a run connects"
            )),
            HostPattern::Exact(name) => pinned(&*resolver, policy, &name, &shown, &who, &through).await,
        };
        findings.push(finding);
    }
    findings
}

/// One exact egress name resolved once and checked against `policy`'s address rules.
async fn pinned(
    resolver: &dyn Resolve,
    policy: &TargetPolicy,
    name: &agentguard_policy::DomainName,
    shown: &str,
    who: &str,
    through: &str,
) -> Finding {
    let pinned = tokio::time::timeout(
        LOOKUP_TIMEOUT,
        agentguard_netpin::pin(resolver, &policy.addresses, name, DEFAULT_MAX_ANSWERS),
    )
    .await;
    match pinned {
        Ok(Ok(host)) => ok(format!(
            "egress {shown} ({who}) resolves through {through} to {:?}, which runs may reach",
            host.addrs
        )),
        Ok(Err(e)) if e.is_refusal() => Finding {
            level: Level::Fail,
            what: format!("egress {shown} ({who}): runs would refuse it ({}): {e}", e.reason()),
            fix: "only public addresses are dialed; for a host of your own network add its range to [egress] allow_cidrs".into(),
        },
        Ok(Err(e)) => Finding {
            level: Level::Fail,
            what: format!("egress {shown} ({who}) does not resolve through {through}: {}", lookup_failure(&e)),
            fix: "check the name's spelling in the allowlist, and that the nameservers answer for it".into(),
        },
        Err(_) => Finding {
            level: Level::Fail,
            what: format!("egress {shown} ({who}): no answer through {through} within {} s", LOOKUP_TIMEOUT.as_secs()),
            fix: "check that the nameservers are reachable from this machine".into(),
        },
    }
}

/// Why a lookup failed, in words: hickory's "no records found" (NXDOMAIN, or no A or AAAA
/// record) without its query dump; any other error as its chain.
fn lookup_failure(e: &agentguard_netpin::PinError) -> String {
    let chain = agentguard_audit::error_chain(e);
    if chain.contains("no records found") {
        "it has no address (NXDOMAIN, or no A or AAAA record)".into()
    } else {
        chain
    }
}

//! `agentguard doctor [--config FILE]`: what this machine's engines can enforce, whether the
//! relay of `network = "egress"` runs is present and static, and, when there is a config
//! file, what that config needs (`checkup.rs`); for a config with `engine = "kubernetes"`,
//! the cluster's checks instead (`agentguard_kubectl::doctor`), the NetworkPolicy canary
//! included.

use std::path::PathBuf;

use agentguard_container::doctor::{self, Finding, Level};
use agentguard_sandbox::relay::RelayProgram;

use crate::args::DoctorArgs;
use crate::{config, exit, output};

pub(crate) fn run(args: &DoctorArgs) -> anyhow::Result<u8> {
    let runtime = crate::signal::runtime()?;
    let path = args.config.clone().unwrap_or_else(|| {
        std::env::var_os("AGENTGUARD_CONFIG")
            .map_or_else(|| PathBuf::from("agentguard.toml"), PathBuf::from)
    });
    // Loaded once, for the cluster's checks or the local ones.
    let loaded = path.exists().then(|| config::load(&path));
    // A cluster config is checked on its cluster; the local engines do not matter to it.
    if let Some(Ok(config)) = &loaded
        && let Some(cluster) = config.cluster()
    {
        let kubernetes = &cluster.kubernetes;
        let kubectl = agentguard_kubectl::Kubectl::new(&kubernetes.settings);
        let gvisor = config.spec.runtime().is_some_and(|r| r.is_gvisor());
        let (_, labels) = crate::cluster::identity(&config.spec);
        let findings = runtime.block_on(agentguard_kubectl::doctor::diagnose(
            &kubectl,
            &kubernetes.settings,
            gvisor,
            &kubernetes.accept_weakened,
            &labels,
        ));
        return write(findings);
    }
    let mut findings = runtime.block_on(doctor::diagnose());
    findings.push(relay());
    match loaded {
        Some(Ok(config)) => {
            findings.extend(runtime.block_on(crate::checkup::config(&path, &config)));
        }
        Some(Err(e)) => findings.push(Finding {
            level: Level::Fail,
            what: format!("{}: {e:#}", path.display()),
            fix: "fix the config file (docs/config.md lists every key)".into(),
        }),
        None if args.config.is_some() => findings.push(Finding {
            level: Level::Fail,
            what: format!("no config file at {}", path.display()),
            fix: "name an existing file, or write one with `agentguard init`".into(),
        }),
        None => findings.push(Finding {
            level: Level::Warn,
            what: format!("no config file at {} (or in AGENTGUARD_CONFIG): what a config needs was not checked", path.display()),
            fix: "run `agentguard doctor --config FILE`, or run it where agentguard.toml is".into(),
        }),
    }
    write(findings)
}

/// The relay a `network = "egress"` run would use: `AGENTGUARD_RELAY`, or the built-in one.
fn relay() -> Finding {
    let program = match std::env::var_os(config::RELAY_ENV).filter(|p| !p.is_empty()) {
        Some(path) => RelayProgram::from_file(&PathBuf::from(path)),
        None => RelayProgram::embedded(),
    };
    match program {
        Ok(relay) => Finding {
            level: Level::Ok,
            what: format!(
                "{} is present and static ({} bytes): network = \"egress\" runs can start",
                relay.origin(),
                relay.len()
            ),
            fix: String::new(),
        },
        Err(e) => Finding {
            level: Level::Fail,
            what: format!("network = \"egress\" runs would be refused: {e}"),
            fix: format!(
                "unset {} to use the built-in relay, or rebuild agentguard",
                config::RELAY_ENV
            ),
        },
    }
}

/// One line per finding (`OK`, `WARN`, `FAIL`, then what was seen; a fix on the next line);
/// exit 1 when any check failed.
fn write(findings: Vec<Finding>) -> anyhow::Result<u8> {
    let failed = findings.iter().any(|f| f.level == Level::Fail);
    output::write_lines(findings.into_iter().map(|f| {
        let tag = match f.level {
            Level::Ok => "OK  ",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        };
        if f.fix.is_empty() {
            format!("{tag} {}", f.what)
        } else {
            format!("{tag} {}\n     fix: {}", f.what, f.fix)
        }
    }))?;
    Ok(if failed { exit::FAILURE } else { exit::SUCCESS })
}

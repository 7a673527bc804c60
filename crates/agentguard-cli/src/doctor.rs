//! `agentguard doctor`: what this machine's engines can enforce, whether the relay of
//! `network = "egress"` runs is present and static, and a trivial hardened run of the
//! configured image and whether each configured secret is present (never its value) when
//! there is a config file; for a config with `engine = "kubernetes"`,
//! the cluster's checks instead (`agentguard_kubectl::doctor`), the NetworkPolicy canary
//! included.

use std::path::PathBuf;

use agentguard_container::doctor::{self, Finding, Level};
use agentguard_sandbox::relay::RelayProgram;

use crate::{config, exit, output};

pub(crate) fn run() -> anyhow::Result<u8> {
    let runtime = crate::signal::runtime()?;
    let path = std::env::var_os("AGENTGUARD_CONFIG")
        .map_or_else(|| PathBuf::from("agentguard.toml"), PathBuf::from);
    // A cluster config is checked on its cluster; the local engines do not matter to it.
    if path.exists()
        && let Ok(config) = config::load(&path)
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
        let failed = findings.iter().any(|f| f.level == Level::Fail);
        write(findings)?;
        return Ok(if failed { exit::FAILURE } else { exit::SUCCESS });
    }
    let mut findings = runtime.block_on(doctor::diagnose());
    findings.push(relay());
    // The trivial hardened run uses the image of the config in use, when there is one.
    if path.exists() {
        match config::load(&path) {
            Ok(config) => {
                findings.extend(secrets(config.commands.routes()));
                findings.push(runtime.block_on(doctor::trial_run(&config.spec)));
            }
            Err(e) => findings.push(Finding {
                level: Level::Fail,
                what: format!("{}: {e:#}", path.display()),
                fix: "fix the config file".into(),
            }),
        }
    } else {
        findings.push(Finding {
            level: Level::Warn,
            what: format!("no config file at {} (or in AGENTGUARD_CONFIG): the trivial hardened run of its image was skipped", path.display()),
            fix: "run `agentguard doctor` where agentguard.toml is, or set AGENTGUARD_CONFIG".into(),
        });
    }
    let failed = findings.iter().any(|f| f.level == Level::Fail);
    write(findings)?;
    Ok(if failed { exit::FAILURE } else { exit::SUCCESS })
}

/// Each `[secrets]` entry: present and usable, or what is wrong (never its value).
fn secrets(routes: &config::Routes) -> Vec<Finding> {
    routes
        .check_secrets()
        .into_iter()
        .map(|(name, source, problem)| match problem {
            None => Finding {
                level: Level::Ok,
                what: format!("secret {name:?} ({source}) is present"),
                fix: String::new(),
            },
            Some(problem) => Finding {
                level: Level::Fail,
                what: problem,
                fix: format!("provide {source} before agentguard starts: runs with a route using {name:?} are refused until then"),
            },
        })
        .collect()
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

fn write(findings: Vec<Finding>) -> anyhow::Result<()> {
    output::write_lines(findings.into_iter().map(|f| {
        let tag = match f.level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        if f.fix.is_empty() {
            format!("{tag} {}", f.what)
        } else {
            format!("{tag} {}\n     fix: {}", f.what, f.fix)
        }
    }))?;
    Ok(())
}

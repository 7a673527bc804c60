//! `agentguard doctor`: what this machine's engines can enforce, and a trivial hardened run of
//! the configured image when there is a config file.

use std::path::PathBuf;

use agentguard_container::doctor::{self, Finding, Level};

use crate::{config, exit, output};

pub(crate) fn run() -> anyhow::Result<u8> {
    let runtime = crate::run::runtime()?;
    let mut findings = runtime.block_on(doctor::diagnose());
    // The trivial hardened run uses the image of the config in use, when there is one.
    let path = std::env::var_os("AGENTGUARD_CONFIG")
        .map_or_else(|| PathBuf::from("agentguard.toml"), PathBuf::from);
    if path.exists() {
        match config::load(&path) {
            Ok(config) => findings.push(runtime.block_on(doctor::trial_run(&config.spec))),
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
    Ok(if failed { exit::FAILURE } else { exit::SUCCESS })
}

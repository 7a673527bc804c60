//! Demo 6, continued: the learn loop (docs/learn.md). The command refused a host; an observe
//! run lets it through and records it as observed; `policy suggest` turns the verified log
//! into the config line; `--write` applies it; the plain run then succeeds.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

use crate::demo_egress::run_command;

pub(crate) fn run(agentguard: &Path, config: &Path, log: &Path) -> Result<()> {
    let config_text = config.to_string_lossy();
    println!("\n-- learn the policy: observe once, suggest, write, run again");
    let args = ["run", "--config", &config_text, "--observe", "elsewhere"];
    println!("$ agentguard {}", args.join(" "));
    let observed = Command::new(agentguard).args(args).output()?;
    print!("{}", String::from_utf8_lossy(&observed.stdout));
    print!("{}", String::from_utf8_lossy(&observed.stderr));
    let log_text = log.to_string_lossy();
    let suggest = ["policy", "suggest", &log_text, "--config", &config_text];
    println!("$ agentguard {}", suggest.join(" "));
    let suggested = Command::new(agentguard).args(suggest).output()?;
    print!("{}", String::from_utf8_lossy(&suggested.stdout));
    let mut write = suggest.to_vec();
    write.push("--write");
    println!("$ agentguard {}", write.join(" "));
    let written = Command::new(agentguard).args(&write).output()?;
    print!("{}", String::from_utf8_lossy(&written.stderr));
    let after = run_command(agentguard, config, "elsewhere")?;
    if !observed.status.success()
        || !String::from_utf8_lossy(&suggested.stdout).contains("\"files.example.test\"")
        || !written.status.success()
        || !after.status.success()
    {
        bail!("the learn loop did not behave as documented");
    }
    Ok(())
}

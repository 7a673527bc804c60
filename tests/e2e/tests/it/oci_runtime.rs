//! `engine = "oci"` with `runtime` given as a path: a runtime program of the user's choosing
//! runs as runc does, and one that drops the seccomp filter it was given (as a runtime built
//! without seccomp support does, silently) is refused by the isolation receipt before the
//! command starts. The dropping runtime is a wrapper that deletes `linux.seccomp` from the
//! bundle's `config.json` and then runs runc with the same arguments.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use agentguard_container::EngineKind;
use agentguard_e2e::{Folder, which};
use anyhow::{Context, Result, ensure};

use crate::combo_or_skip;

/// A runtime that drops the seccomp filter, then runs `RUNC` (filled in) with its arguments.
const DROPPING: &str = r#"#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
if "--bundle" in args:
    path = os.path.join(args[args.index("--bundle") + 1], "config.json")
    with open(path) as f:
        config = json.load(f)
    config["linux"].pop("seccomp", None)
    with open(path, "w") as f:
        json.dump(config, f)
os.execv("RUNC", ["runc"] + args)
"#;

#[test]
fn a_runtime_that_drops_the_seccomp_filter_is_refused_before_the_command_runs() -> Result<()> {
    let combo = combo_or_skip!(
        "a_runtime_that_drops_the_seccomp_filter_is_refused_before_the_command_runs"
    );
    if combo.engine != EngineKind::Oci || combo.gvisor() {
        println!(
            "{}: the dropping runtime wraps runc, so it runs on oci+runc",
            combo.label()
        );
        return Ok(());
    }
    let runc = which("runc")?;
    let dir = Folder::new(&combo.unique("runtime"), (0, 0))?;
    let dropping = dir.join("dropping-runtime");
    std::fs::write(&dropping, DROPPING.replace("RUNC", &runc))?;
    std::fs::set_permissions(&dropping, std::fs::Permissions::from_mode(0o755))?;
    let run = |runtime: &str| -> Result<std::process::Output> {
        let config = dir.join("agentguard.toml");
        std::fs::write(
            &config,
            format!(
                "image = \"{}\"\nengine = \"oci\"\nruntime = \"{runtime}\"\ntimeout = 60\n\n[commands]\nran = [\"sh\", \"-c\", \"echo RAN; grep Seccomp: /proc/self/status\"]\n",
                combo.probe_image
            ),
        )?;
        Ok(Command::new(&combo.binary)
            .args(["run", "--config"])
            .arg(&config)
            .arg("ran")
            .output()?)
    };
    // runc named by its path runs as `runtime = "runc"` does, its filter in force.
    let plain = run(&runc)?;
    let said = String::from_utf8_lossy(&plain.stdout);
    ensure!(
        plain.status.success() && said.contains("RAN") && said.contains("Seccomp:\t2"),
        "runc by path: {said} {}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let dropped = run(dropping.to_str().context("path")?)?;
    let (out, err) = (
        String::from_utf8_lossy(&dropped.stdout),
        String::from_utf8_lossy(&dropped.stderr),
    );
    ensure!(
        dropped.status.code() == Some(125)
            && !out.contains("RAN")
            && err.contains("isolation_failed")
            && err.contains("seccomp: mode 0: no filter in force"),
        "the dropping runtime: exit {:?}, stdout {out:?}, stderr {err:?}",
        dropped.status.code()
    );
    println!(
        "{}: runc by path ran with its filter; a runtime that dropped it was refused",
        combo.label()
    );
    Ok(())
}

//! Issue 37: the isolation receipt on a real engine. An engine wrapper that turns `--network
//! none` into the engine's default bridge network (a broken isolation) makes a run under runc
//! fail `isolation_failed` naming the interface, and the command never starts (the marker it
//! would write does not exist); the refusal is in the chained log. Under gVisor both engines
//! also give runsc its own `--network=none`, so the sandbox still has only `lo`: the receipt
//! says so and the run proceeds.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use agentguard_e2e::{Folder, which};
use anyhow::{Context, Result, ensure};

use crate::combo_or_skip;

/// A wrapper named like the engine that replaces `--network none` by `--network bridge`.
const WRAPPER: &str = r#"#!/bin/sh
prev=""
n=$#
i=0
while [ $i -lt $n ]; do
    a="$1"; shift; i=$((i+1))
    if [ "$prev" = "--network" ] && [ "$a" = "none" ]; then a=bridge; fi
    set -- "$@" "$a"
    prev="$a"
done
exec ENGINE "$@"
"#;

/// For engine = "oci": a wrapper named like the runtime that takes the network namespace out
/// of the bundle's config.json (the container then shares the host's network).
const RUNTIME_WRAPPER: &str = r#"#!/bin/sh
prev=""
for a in "$@"; do
    if [ "$prev" = "--bundle" ]; then
        sed -i 's/{"type":"network"},//' "$a/config.json"
    fi
    prev="$a"
done
exec RUNTIME "$@"
"#;

#[test]
fn a_broken_network_fails_the_receipt_and_the_command_never_runs() -> Result<()> {
    let combo = combo_or_skip!("a_broken_network_fails_the_receipt_and_the_command_never_runs");
    let ws = Folder::new(&combo.unique("receipt"), (1234, 2345))?;
    std::fs::create_dir_all(ws.join("out"))?;
    std::os::unix::fs::chown(ws.join("out"), Some(1234), Some(2345))?;
    let bin = Folder::new(&combo.unique("receipt-bin"), (0, 0))?;
    let oci = combo.engine == agentguard_container::EngineKind::Oci;
    let wrapped = if oci {
        combo.runtime.clone().unwrap_or_else(|| "runc".into())
    } else {
        combo.program().to_owned()
    };
    let real = which(&wrapped)?;
    let wrapper = bin.join(&wrapped);
    let script = if oci {
        RUNTIME_WRAPPER.replace("RUNTIME", &real)
    } else {
        WRAPPER.replace("ENGINE", &real)
    };
    std::fs::write(&wrapper, script)?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    // The wrapper is the engine, or for engine = "oci" the runtime (by its path).
    let (engine, runtime_line) = if oci {
        (
            "oci".to_owned(),
            format!("runtime = \"{}\"\n", wrapper.display()),
        )
    } else {
        (wrapper.display().to_string(), combo.runtime_line())
    };
    let log = bin.join("audit.jsonl");
    let config = bin.join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"{}\"\nengine = \"{}\"\n{}workspace = \"{}\"\nuser = \"1234:2345\"\ntimeout = 60\n\n[commands.mark]\nargv = [\"sh\", \"-c\", \"echo ran > /workspace/out/marker\"]\nwritable = [\"out\"]\n\n[audit]\npath = \"{}\"\n",
            combo.probe_image,
            engine,
            runtime_line,
            ws.0.display(),
            log.display()
        ),
    )?;
    let run = Command::new(&combo.binary)
        .args(["run", "--config"])
        .arg(&config)
        .arg("mark")
        .output()?;
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let verify = Command::new(&combo.binary)
        .args(["audit", "verify"])
        .arg(&log)
        .output()?;
    ensure!(
        verify.status.success(),
        "the log does not verify: {verify:?}"
    );
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&log)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let receipt = events
        .iter()
        .find(|e| e["kind"] == "isolation_receipt")
        .context("no isolation_receipt event")?;
    let end = events
        .iter()
        .find(|e| e["kind"] == "container_run")
        .context("no container_run event")?;
    let marker = ws.join("out/marker");
    if combo.gvisor() {
        // runsc's own --network=none still holds: only lo inside, and the receipt says so.
        ensure!(run.status.success(), "{}: {stderr}", combo.label());
        ensure!(
            receipt["decision"] == "allow" && receipt["data"]["checks"]["interfaces"] == "lo",
            "{receipt}"
        );
        ensure!(marker.exists(), "the command ran");
    } else {
        ensure!(
            run.status.code() == Some(125),
            "{}: {stderr}",
            combo.label()
        );
        // The engine's bridge gives eth0; the host's own network (oci) has its interfaces.
        let seen = if oci {
            "interfaces: lo,"
        } else {
            "interfaces: lo,eth0"
        };
        ensure!(
            stderr.contains("isolation_failed") && stderr.contains(seen),
            "{stderr}"
        );
        ensure!(
            !marker.exists(),
            "the command ran although the receipt failed"
        );
        ensure!(
            receipt["decision"] == "deny"
                && receipt["data"]["failed"]
                    .as_array()
                    .is_some_and(|f| f.contains(&"interfaces".into())),
            "{receipt}"
        );
        ensure!(
            end["decision"] == "error" && end["reason"] == "isolation_failed",
            "{end}"
        );
    }
    ensure!(
        receipt["data"]["container"] == end["data"]["container"],
        "{receipt} {end}"
    );
    Ok(())
}

/// What `reap.sh` does inside: names pid 1, leaves an orphan that ends, counts zombies a
/// second later, then ends as its argument says (an exit code, or a signal it sends itself).
const REAP: &str = r#"echo "pid1=$(tr '\0' ' ' < /proc/1/cmdline)"
sh -c 'sh -c "exit 0" & exit 0'
sleep 1
echo "zombies=$(grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l)"
case "$1" in
    term) kill -TERM $$ ;;
    *) exit "$1" ;;
esac
"#;

/// The relay is the container's init: pid 1, it reaps an orphan, and it passes the command's
/// status on (an exit code as it is, a signal as 128 + its number).
#[test]
fn the_relay_is_pid_1_reaps_orphans_and_passes_the_status_on() -> Result<()> {
    let combo = combo_or_skip!("the_relay_is_pid_1_reaps_orphans_and_passes_the_status_on");
    let ws = Folder::new(&combo.unique("reap"), (0, 0))?;
    std::fs::write(ws.join("reap.sh"), REAP)?;
    let config = ws.join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"{}\"\nengine = \"{}\"\n{}workspace = \".\"\ntimeout = 60\n\n[commands]\nseven = [\"sh\", \"/workspace/reap.sh\", \"7\"]\nterm = [\"sh\", \"/workspace/reap.sh\", \"term\"]\n",
            combo.probe_image,
            combo.program(),
            combo.runtime_line(),
        ),
    )?;
    for (name, code) in [("seven", 7), ("term", 143)] {
        let run = Command::new(&combo.binary)
            .args(["run", "--config"])
            .arg(&config)
            .arg(name)
            .output()?;
        let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&run.stderr);
        ensure!(
            run.status.code() == Some(code),
            "{} {name}: {:?}: {stdout} {stderr}",
            combo.label(),
            run.status
        );
        ensure!(
            stdout.contains("pid1=/run/agentguard/relay --receipt "),
            "{name}: pid 1 is not the relay: {stdout}"
        );
        ensure!(
            stdout.contains("zombies=0"),
            "{name}: an orphan was not reaped: {stdout}"
        );
    }
    Ok(())
}

//! Rootless Podman, as a real non-root user (`cargo xtask setup` creates it, with its
//! subordinate ids and `uidmap`): on this cgroup v1 host a rootless engine would run the
//! container with no memory, cpus or pids limit, so `agentguard run` refuses it before anything
//! starts (exit 125, `limits_not_enforced`, naming the cause and the fix). With
//! `accept_weakened = ["limits"]` the run goes ahead, is audited as weakened, and a rw
//! workspace keeps the files the command writes owned by the user (`--userns=keep-id`).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use agentguard_container::EngineKind;
use agentguard_e2e::{Combo, Folder, stdout_text};
use anyhow::{Context, Result, ensure};

use crate::combo_or_skip;

/// The user, its uid and gid.
fn rootless_user() -> Result<(String, u32, u32)> {
    let user = std::env::var("AGENTGUARD_E2E_ROOTLESS_USER")
        .context("AGENTGUARD_E2E_ROOTLESS_USER is not set (run `cargo xtask e2e`)")?;
    let id = |flag: &str| -> Result<u32> {
        let out = Command::new("id").args([flag, &user]).output()?;
        ensure!(
            out.status.success(),
            "no user {user}: run `cargo xtask setup`"
        );
        Ok(stdout_text(&out).parse()?)
    };
    Ok((user.clone(), id("-u")?, id("-g")?))
}

/// `program args` as `user`, in `dir`, with the user's own runtime folder and home.
fn as_user(user: &str, uid: u32, dir: &Path, program: &Path, args: &[&str]) -> Result<Output> {
    // The user's own runs folder ($XDG_RUNTIME_DIR/agentguard), never root's.
    Ok(Command::new("runuser")
        .args(["-u", user, "--", "env", "-u", "AGENTGUARD_RUN_DIR"])
        .arg(format!("XDG_RUNTIME_DIR=/run/user/{uid}"))
        .arg(format!("HOME=/home/{user}"))
        .arg(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()?)
}

fn config(combo: &Combo, dir: &Folder, name: &str, extra: &str) -> Result<String> {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "{extra}image = \"{}\"\nengine = \"podman\"\n{}workspace = \"workspace\"\nworkspace_mode = \"rw\"\ntimeout = 60\n\n[commands]\nprobe = [\"sh\", \"-c\", \"id -u; touch /workspace/made-by-the-command\"]\n\n[audit]\npath = \"audit.jsonl\"\n",
            combo.probe_image,
            combo.runtime_line()
        ),
    )?;
    Ok(path.to_string_lossy().into_owned())
}

#[test]
fn rootless_podman_refuses_a_run_whose_limits_would_not_apply() -> Result<()> {
    let combo = combo_or_skip!("rootless_podman_refuses_a_run_whose_limits_would_not_apply");
    if combo.engine != EngineKind::Podman {
        println!(
            "rootless: only Podman runs rootless here; nothing to check on {}",
            combo.label()
        );
        return Ok(());
    }
    ensure!(
        !Path::new("/sys/fs/cgroup/cgroup.controllers").exists(),
        "this check expects the cgroup v1 host of ENGINES.md, where rootless limits never apply"
    );
    let (user, uid, gid) = rootless_user()?;
    let dir = Folder::new(&combo.unique("rootless"), (uid, gid))?;
    std::fs::create_dir_all(dir.join("workspace"))?;
    std::os::unix::fs::chown(dir.join("workspace"), Some(uid), Some(gid))?;
    let refused = config(&combo, &dir, "refused.toml", "")?;
    let out = as_user(
        &user,
        uid,
        &dir.0,
        &combo.binary,
        &["run", "--config", &refused, "probe"],
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(125),
        "exit {:?}: {stderr}",
        out.status.code()
    );
    for needle in [
        "limits_not_enforced",
        "cgroup v1",
        "cgroup v2",
        "accept_weakened",
    ] {
        ensure!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
    ensure!(
        !dir.join("workspace/made-by-the-command").exists(),
        "nothing ran"
    );
    let podman = Path::new("/usr/bin/podman");
    let runtime = combo.runtime.as_deref().unwrap_or("runc");
    let listed = as_user(
        &user,
        uid,
        &dir.0,
        podman,
        &["--runtime", runtime, "ps", "-a", "-q"],
    )?;
    ensure!(
        stdout_text(&listed).is_empty(),
        "no container was created: {listed:?}"
    );
    println!(
        "rootless: refused on {} as {user}: {}",
        combo.label(),
        stderr.trim()
    );

    // Accepted: the run goes ahead (the image copied into the user's own storage).
    if combo.gvisor() {
        println!(
            "rootless: gVisor is not run rootless here; the accepted run is checked under runc"
        );
        return Ok(());
    }
    let saved = Command::new("podman")
        .args(["--runtime", "runc", "save", &combo.probe_image])
        .stdout(Stdio::piped())
        .spawn()?;
    let load = Command::new("runuser")
        .args(["-u", &user, "--", "env"])
        .arg(format!("XDG_RUNTIME_DIR=/run/user/{uid}"))
        .arg(format!("HOME=/home/{user}"))
        .args(["podman", "--runtime", "runc", "load", "-q"])
        .current_dir(&dir.0)
        .stdin(saved.stdout.context("podman save's output")?)
        .output()?;
    ensure!(load.status.success(), "podman load as {user}: {load:?}");
    let accepted = config(
        &combo,
        &dir,
        "accepted.toml",
        "accept_weakened = [\"limits\"]\n",
    )?;
    let out = as_user(
        &user,
        uid,
        &dir.0,
        &combo.binary,
        &["run", "--config", &accepted, "probe"],
    )?;
    let _ = as_user(
        &user,
        uid,
        &dir.0,
        podman,
        &["--runtime", "runc", "rmi", "-f", &combo.probe_image],
    );
    ensure!(out.status.success(), "accepted run: {out:?}");
    ensure!(
        stdout_text(&out) == uid.to_string(),
        "inside, the user's own uid: {out:?}"
    );
    let made = std::fs::metadata(dir.join("workspace/made-by-the-command"))?;
    ensure!(
        std::os::unix::fs::MetadataExt::uid(&made) == uid,
        "the file the command wrote belongs to the user (--userns=keep-id), not a subordinate id"
    );
    let audit = std::fs::read_to_string(dir.join("audit.jsonl"))?;
    ensure!(
        audit
            .lines()
            .any(|l| l.contains("\"container_run\"") && l.contains("\"weakened\":[\"limits\"]")),
        "the run is audited as weakened: {audit}"
    );
    println!(
        "rootless: accepted on {}: uid {uid} inside, the rw workspace file is the user's",
        combo.label()
    );
    Ok(())
}

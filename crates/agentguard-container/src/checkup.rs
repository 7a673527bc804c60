//! `agentguard doctor --config`'s checks of one loaded spec: its image present in the local
//! store (and what its pin says), each command's program (argv[0]) found and executable
//! inside that image, and each command's `writable` and `hidden` workspace paths as a run
//! would find them now.
//!
//! The program check starts one hardened container per distinct program, user and
//! environment: the command's own values (user, environment, runtime, a read-only workspace)
//! with no network, running a `sh` script that looks the program up on the container's `PATH`
//! as the engine would, never the command itself.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use agentguard_policy::CommandAllowlist;

use crate::doctor::{Finding, Level, finding};
use crate::error::RunError;
use crate::spec::{ContainerSpec, ImagePin, WorkspaceMode};
use crate::values::UserIds;

/// The lookup run inside the image: exit 3 when the program is missing, 4 when it is not a
/// file this user may execute; its path on stdout otherwise. One line: an argv element holds
/// no control character.
const LOOKUP: &str = r#"p=$1; n=; case $p in */*) f=$p ;; *) f=; IFS=:; for d in $PATH; do [ -n "$d" ] || continue; if [ -f "$d/$p" ] && [ -x "$d/$p" ]; then f=$d/$p; break; fi; if [ -e "$d/$p" ] && [ -z "$n" ]; then n=$d/$p; fi; done; if [ -z "$f" ] && [ -n "$n" ]; then f=$n; fi; if [ -z "$f" ]; then echo "not found on PATH=$PATH"; exit 3; fi ;; esac; if [ ! -e "$f" ]; then echo "$f does not exist"; exit 3; fi; if [ -d "$f" ]; then echo "$f is a folder"; exit 4; fi; if [ ! -x "$f" ]; then echo "$f is not executable by this user"; exit 4; fi; echo "$f""#;

/// The spec's image: present in the engine's local store, and its pin. A tag is a warning
/// (it can be moved to other content); a pin that does not match is a failure.
pub async fn image(spec: &ContainerSpec) -> Finding {
    let image = spec.image();
    let engine = spec.engine().kind;
    let id = match crate::image::resolve(spec).await {
        Ok(id) => crate::image::recorded_id(&id),
        Err(e) => {
            let fix = match e {
                RunError::MissingImage { .. } => format!(
                    "build or load it (`{engine} build -t {image} .`, `{engine} load -i FILE`), then pin it by ID or digest"
                ),
                RunError::ImagePin { .. } => "load the pinned image, or pin the one present".into(),
                _ => "see the message".into(),
            };
            return finding(Level::Fail, format!("image {image}: {e}"), fix);
        }
    };
    match spec.image_pin() {
        ImagePin::Tag => finding(
            Level::Warn,
            format!(
                "image {image} is present ({id}) but pinned by tag only: the tag can be moved to other content"
            ),
            format!("pin it: image = \"{id}\" (or NAME@sha256:DIGEST)"),
        ),
        _ => finding(
            Level::Ok,
            format!("image {image} is present and its pin matches ({id})"),
            "",
        ),
    }
}

/// Each command's program (argv[0]) looked up inside the image as the command's own user
/// with its own environment: one finding per command.
/// With `receipt` (the relay program), each lookup runs with it as its init (as
/// [`crate::doctor::trial_run`]).
pub async fn programs(spec: &ContainerSpec, receipt: Option<&std::path::Path>) -> Vec<Finding> {
    let mut seen: BTreeMap<LookupKey, Looked> = BTreeMap::new();
    let mut findings = Vec::new();
    let names: Vec<String> = spec.commands().names().map(str::to_owned).collect();
    for name in names {
        let own = spec.for_command(&name).into_owned();
        let Ok(command) = own.commands().get(&name) else {
            continue;
        };
        let program = command.argv()[0].clone();
        if command
            .params()
            .keys()
            .any(|p| program.contains(&format!("{{{p}}}")))
        {
            findings.push(finding(
                Level::Warn,
                format!("command {name}: its program {program:?} comes from a param, so it was not looked up"),
                "name the program itself in argv[0]",
            ));
            continue;
        }
        let user = own.user();
        let key = (
            program.clone(),
            (user.uid, user.gid),
            own.environment().clone(),
        );
        let (level, what, fix) = match seen.get(&key) {
            Some(found) => found.clone(),
            None => {
                let found = lookup(&own, &program, user, receipt).await;
                seen.insert(key, found.clone());
                found
            }
        };
        findings.push(finding(level, format!("command {name}: {what}"), fix));
    }
    findings
}

/// What one lookup depends on: the program, the user, the environment.
type LookupKey = (String, (u32, u32), BTreeMap<String, String>);
/// One lookup's finding, without the command's name: level, what, fix.
type Looked = (Level, String, String);

/// Runs [`LOOKUP`] for `program` in a hardened container of `own`'s image and values.
async fn lookup(
    own: &ContainerSpec,
    program: &str,
    user: UserIds,
    receipt: Option<&std::path::Path>,
) -> Looked {
    let image = own.image();
    let mut probe = own.clone();
    probe.workspace_mode = WorkspaceMode::ReadOnly;
    probe.writable.clear();
    probe.hidden.clear();
    probe.per_command.clear();
    probe.check = false;
    probe.timeout = Duration::from_secs(60);
    probe.max_output_bytes = 64 * 1024;
    let argv = ["sh", "-c", LOOKUP, "sh", program];
    probe.commands = match CommandAllowlist::from_pairs([("doctor-program", argv)]) {
        Ok(commands) => commands,
        Err(e) => {
            return (
                Level::Warn,
                format!("its program {program:?} could not be looked up: {e}"),
                "check it by hand".into(),
            );
        }
    };
    let mut executor = crate::ContainerExecutor::new(probe);
    if let Some(program) = receipt {
        executor = executor.with_receipt(program);
    }
    let outcome = match executor.invoke("doctor-program", &[]) {
        Ok(invocation) => executor.run(&invocation).await,
        Err(e) => Err(e),
    };
    let who = format!("uid {}", user.uid);
    match outcome {
        Ok(result) => {
            let said = String::from_utf8_lossy(&result.stdout).trim().to_owned();
            match result.exit_code {
                Some(0) => (
                    Level::Ok,
                    format!("its program {program} is {said} in {image}, executable by {who}"),
                    String::new(),
                ),
                Some(3) => (
                    Level::Fail,
                    format!("its program {program} is not in image {image}: {said}"),
                    "install it in the image, or change the command's argv[0] to a program the image has".into(),
                ),
                Some(4) => (
                    Level::Fail,
                    format!("its program {program} cannot be run by {who} in image {image}: {said}"),
                    "make it executable in the image (chmod), or run the command as a user that may execute it".into(),
                ),
                code => (
                    Level::Warn,
                    format!(
                        "its program {program} could not be looked up in image {image} (exit {code:?}; the lookup needs `sh` in the image): {}",
                        String::from_utf8_lossy(&result.stderr).trim()
                    ),
                    format!("check by hand that {program} is in the image and executable"),
                ),
            }
        }
        Err(e) => (
            Level::Fail,
            format!("looking up its program {program} in image {image} failed: {e}"),
            format!("see the message ({})", e.reason()),
        ),
    }
}

/// Each command's `writable` paths (real folders the command's user may write) and `hidden`
/// patterns (the paths they match now), once per distinct entry.
pub fn paths(spec: &ContainerSpec) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut writable_seen = std::collections::BTreeSet::new();
    let mut hidden_seen = std::collections::BTreeSet::new();
    for name in spec.commands().names() {
        let own = spec.for_command(name);
        let Some(root) = own.workspace.as_deref() else {
            continue;
        };
        for entry in &own.writable {
            if !writable_seen.insert(entry.clone()) {
                continue;
            }
            findings.push(writable(root, entry, own.user()));
        }
        for pattern in &own.hidden {
            if !hidden_seen.insert(pattern.clone()) {
                continue;
            }
            findings.push(hidden(root, pattern));
        }
    }
    findings
}

fn writable(root: &std::path::Path, entry: &str, user: UserIds) -> Finding {
    if let Err(why) = crate::masks::check_writable(root, entry) {
        return finding(
            Level::Fail,
            format!("writable path {entry:?}: {why}"),
            "create it as a real folder in the workspace (no symlink along it)",
        );
    }
    let Ok(meta) = std::fs::metadata(root.join(entry)) else {
        return finding(
            Level::Fail,
            format!("writable path {entry:?} cannot be read"),
            "check its permissions",
        );
    };
    let mode = meta.mode();
    let may_write = (meta.uid() == user.uid && mode & 0o200 != 0)
        || (meta.gid() == user.gid && mode & 0o020 != 0)
        || mode & 0o002 != 0;
    if may_write {
        finding(
            Level::Ok,
            format!(
                "writable path {entry:?} is a real folder uid {} may write",
                user.uid
            ),
            "",
        )
    } else {
        finding(
            Level::Warn,
            format!(
                "writable path {entry:?} is owned by {}:{} with mode {:o}: the command runs as {}:{} and cannot write there",
                meta.uid(),
                meta.gid(),
                mode & 0o7777,
                user.uid,
                user.gid
            ),
            format!("chown {}:{} it", user.uid, user.gid),
        )
    }
}

fn hidden(root: &std::path::Path, pattern: &str) -> Finding {
    match crate::masks::hidden_paths(root, &[pattern.to_owned()]) {
        Ok(masks) if masks.is_empty() => finding(
            Level::Ok,
            format!(
                "hidden pattern {pattern:?} matches nothing now (a match that appears before a run is masked then)"
            ),
            "",
        ),
        Ok(masks) => {
            let shown: Vec<&str> = masks.iter().take(5).map(|m| m.path.as_str()).collect();
            let more = if masks.len() > 5 { ", ..." } else { "" };
            finding(
                Level::Ok,
                format!(
                    "hidden pattern {pattern:?} masks {} path(s) now: {}{more}",
                    masks.len(),
                    shown.join(", ")
                ),
                "",
            )
        }
        Err(e) => finding(
            Level::Fail,
            e.to_string(),
            "every run would be refused until this is fixed",
        ),
    }
}

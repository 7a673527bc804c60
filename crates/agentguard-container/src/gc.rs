//! Sweeping containers left behind by a crashed run (`agentguard gc`, and every run's start).
//!
//! Every container agentguard starts carries its owner's pid and start time and a deadline.
//! A container is stale when its owner is gone (no such pid, or the pid now belongs to a
//! process that started at another time) or its deadline has passed; stale containers are
//! removed with `rm -f`. Killing the `docker run` client, even with SIGKILL, leaves the
//! container running: this sweep is what cleans up after an agentguard that was killed.

use std::time::SystemTime;

use crate::engine::Engine;
use crate::process::{LABEL_DEADLINE, LABEL_OWNER, LABEL_OWNER_START, process_start, run_quiet};

/// A container found stale, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    /// The container's name.
    pub name: String,
    /// Why it is stale.
    pub why: String,
}

/// Finds (and unless `dry_run`, removes) the stale agentguard containers of one engine,
/// passing `global` flags (Podman's runtime selection of the spec in use) before each command.
pub async fn sweep(
    engine: &Engine,
    global: &[String],
    dry_run: bool,
) -> std::io::Result<Vec<Stale>> {
    if engine.kind == crate::kind::EngineKind::Oci {
        return crate::oci::sweep::sweep(engine, global, &engine.oci_root(), dry_run).await;
    }
    let command = |args: &[&str]| engine.command(global, args);
    let filter = format!("label={LABEL_OWNER}");
    let listed = run_quiet(&command(&["ps", "-a", "-q", "--filter", &filter])).await?;
    if !listed.status.success() {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&listed.stderr).trim().to_owned(),
        ));
    }
    let ids: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let format = format!(
        "{{{{.Name}}}}|{{{{index .Config.Labels \"{LABEL_OWNER}\"}}}}|{{{{index .Config.Labels \"{LABEL_OWNER_START}\"}}}}|{{{{index .Config.Labels \"{LABEL_DEADLINE}\"}}}}"
    );
    let mut args = vec!["inspect", "--format", format.as_str()];
    args.extend(ids.iter().map(String::as_str));
    let inspected = run_quiet(&command(&args)).await?;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let stale: Vec<Stale> = String::from_utf8_lossy(&inspected.stdout)
        .lines()
        .filter_map(|line| judge(line, now))
        .collect();
    if !dry_run && !stale.is_empty() {
        let mut rm = vec!["rm", "-f"];
        rm.extend(stale.iter().map(|s| s.name.as_str()));
        run_quiet(&command(&rm)).await?;
    }
    Ok(stale)
}

/// Decides one `name|owner|start|deadline` line.
fn judge(line: &str, now: u64) -> Option<Stale> {
    let mut parts = line.split('|');
    let name = parts.next()?.trim_start_matches('/').to_owned();
    let owner = parts.next().unwrap_or_default();
    let start = parts.next().unwrap_or_default();
    let deadline = parts.next().unwrap_or_default();
    stale_why(Some((owner, start)), deadline, now).map(|why| Stale { name, why })
}

/// Why something with these labels is stale, or `None` while it is not: its owner (pid and
/// start time, when it ran on this machine) is gone, or its deadline (seconds since the epoch)
/// is before `now`.
pub fn stale_why(owner: Option<(&str, &str)>, deadline: &str, now: u64) -> Option<String> {
    owner
        .and_then(|(pid, start)| owner_gone(pid, start))
        .or_else(|| match deadline.parse::<u64>() {
            Ok(d) if d < now => Some(format!("its deadline passed {} s ago", now - d)),
            Ok(_) => None,
            Err(_) => Some(format!("its deadline label {deadline:?} is not a time")),
        })
}

/// Why the owner `pid` (text, as in a label) with process start time `start` is no longer
/// running, or `None` while it is. An empty `start` matches any process with that pid.
pub fn owner_gone(pid: &str, start: &str) -> Option<String> {
    match pid.parse::<u32>() {
        Err(_) => Some(format!("its owner {pid:?} is not a pid")),
        Ok(pid) => match process_start(pid) {
            None => Some(format!("its owner, pid {pid}, is gone")),
            Some(actual) if !start.is_empty() && actual != start => {
                Some(format!("pid {pid} now belongs to another process"))
            }
            Some(_) => None,
        },
    }
}

/// This process's pid and start time, as [`owner_gone`] takes them.
pub fn this_owner() -> (String, String) {
    let pid = std::process::id();
    (pid.to_string(), process_start(pid).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::judge;

    #[test]
    fn stale_containers_are_judged_by_owner_and_deadline() {
        let me = std::process::id();
        let start = crate::process::process_start(me).unwrap();
        let now = 1_000_000;
        assert_eq!(
            judge(&format!("/live|{me}|{start}|{}", now + 10), now),
            None,
            "live owner, deadline ahead"
        );
        let past = judge(&format!("/late|{me}|{start}|{}", now - 5), now).unwrap();
        assert_eq!(
            (past.name.as_str(), past.why.as_str()),
            ("late", "its deadline passed 5 s ago")
        );
        assert!(
            judge(&format!("/reused|{me}|1|{}", now + 10), now)
                .unwrap()
                .why
                .contains("another process")
        );
        assert!(
            judge(&format!("/gone|{}|1|{}", u32::MAX - 1, now + 10), now)
                .unwrap()
                .why
                .contains("is gone")
        );
        assert!(judge("/odd|x||", now).unwrap().why.contains("not a pid"));
    }
}

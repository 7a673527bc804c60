//! What a killed `engine = "oci"` run left: its bundle folder under the runtime's root (the
//! runtime's container with it, if it still runs). Every bundle's `config.json` carries the
//! owner's pid and start time and the deadline as annotations; a bundle whose owner is gone
//! or whose deadline passed is stale: its container is killed and deleted through the
//! runtime, then the folder removed. File reads and, only for what is stale, runtime calls.

use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

use crate::engine::Engine;
use crate::gc::{Stale, stale_why};
use crate::process::{LABEL_DEADLINE, LABEL_OWNER, LABEL_OWNER_START, run_quiet};

/// Finds (and unless `dry_run`, removes) the stale runs of the runtime whose root folder is
/// `root` (`STATE_ROOT/<runtime>`), calling `engine` (the runtime) with `global` flags.
pub(crate) async fn sweep(
    engine: &Engine,
    global: &[String],
    root: &Path,
    dry_run: bool,
) -> std::io::Result<Vec<Stale>> {
    let bundles = root.join("bundles");
    let listed = match std::fs::read_dir(&bundles) {
        Ok(listed) => listed,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut stale = Vec::new();
    for dir in listed {
        let dir = dir?;
        let name = dir.file_name().to_string_lossy().into_owned();
        if let Some(why) = judge(&dir.path(), now) {
            stale.push(Stale { name, why });
        }
    }
    if !dry_run {
        for run in &stale {
            let _ = run_quiet(&engine.command(global, &["kill", &run.name, "KILL"])).await;
            let _ = run_quiet(&engine.command(global, &["delete", "--force", &run.name])).await;
            let _ = std::fs::remove_dir_all(bundles.join(&run.name));
        }
    }
    Ok(stale)
}

/// Why the bundle at `dir` is stale, or `None` while its owner runs and its deadline is
/// ahead. A bundle without a readable config is stale only once it is a minute old (its
/// run may be writing it now).
fn judge(dir: &Path, now: u64) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("config.json"));
    let annotations = text
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .map(|config| config["annotations"].clone());
    let Some(annotations) = annotations else {
        let age = std::fs::metadata(dir)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.elapsed().ok())
            .unwrap_or_default();
        return (age.as_secs() >= 60).then(|| "its bundle has no readable config".to_owned());
    };
    let label = |key: &str| annotations[key].as_str().unwrap_or_default().to_owned();
    let (owner, start) = (label(LABEL_OWNER), label(LABEL_OWNER_START));
    stale_why(Some((&owner, &start)), &label(LABEL_DEADLINE), now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_is_stale_when_its_owner_is_gone_or_its_deadline_passed() {
        let dir = tempfile::tempdir().unwrap();
        let (me, start) = crate::gc::this_owner();
        let write = |name: &str, owner: &str, deadline: u64| {
            let bundle = dir.path().join(name);
            std::fs::create_dir(&bundle).unwrap();
            let config = serde_json::json!({"annotations": {
                LABEL_OWNER: owner, LABEL_OWNER_START: start, LABEL_DEADLINE: deadline.to_string()}});
            std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
            bundle
        };
        let now = 2_000_000_000;
        assert_eq!(judge(&write("live", &me, now + 60), now), None);
        let late = judge(&write("late", &me, now - 5), now).unwrap();
        assert!(late.contains("deadline passed 5 s ago"), "{late}");
        let gone = judge(&write("gone", &(u32::MAX - 1).to_string(), now + 60), now).unwrap();
        assert!(gone.contains("is gone"), "{gone}");
        let fresh = dir.path().join("writing");
        std::fs::create_dir(&fresh).unwrap();
        assert_eq!(
            judge(&fresh, now),
            None,
            "a bundle being written is left alone"
        );
    }
}

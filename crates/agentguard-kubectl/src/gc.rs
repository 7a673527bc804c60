//! Sweeping what killed runs left on the cluster (`agentguard gc --config FILE`).
//!
//! Every object of a run carries its run id, and its owner's pid, start time and deadline,
//! and the host it was started from. A run's objects are stale when its owner ran on this
//! host and is gone, or its deadline has passed (from any host); stale runs are deleted by
//! their run label.

use agentguard_container::gc::stale_why;
use agentguard_container::{LABEL_DEADLINE, LABEL_OWNER, LABEL_OWNER_START};
use agentguard_k8s::LABEL_RUN;

use crate::error::Result;
use crate::kubectl::Kubectl;

/// The label naming the host a run was started from.
pub const LABEL_HOST: &str = "agentguard.dev/host";

/// A run found stale, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleRun {
    /// The run id (the Job's name).
    pub run: String,
    /// Why it is stale.
    pub why: String,
}

/// This host's name as a label value: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both
/// ends (`unknown` when there is none).
pub fn host_label() -> (String, String) {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let cleaned: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let trimmed = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let value = if trimmed.is_empty() {
        "unknown"
    } else {
        trimmed
    };
    (LABEL_HOST.to_owned(), value.to_owned())
}

/// Finds (and unless `dry_run`, deletes) the stale runs in the namespace.
pub async fn sweep(kubectl: &Kubectl, dry_run: bool) -> Result<Vec<StaleRun>> {
    let jobs = kubectl
        .list(
            "jobs.batch",
            &[("app.kubernetes.io/managed-by", "agentguard")],
        )
        .await?;
    let now = crate::proof::now();
    let (_, here) = host_label();
    let mut stale = Vec::new();
    for job in &jobs {
        let labels = &job["metadata"]["labels"];
        let label = |key: &str| labels[key].as_str().unwrap_or_default();
        let Some(run) = labels[LABEL_RUN].as_str() else {
            continue;
        };
        // A pid means something only on the host that started the run.
        let owner =
            (label(LABEL_HOST) == here).then(|| (label(LABEL_OWNER), label(LABEL_OWNER_START)));
        if let Some(why) = stale_why(owner, label(LABEL_DEADLINE), now) {
            stale.push(StaleRun {
                run: run.to_owned(),
                why,
            });
        }
    }
    if !dry_run {
        for run in &stale {
            kubectl.delete_run(&run.run).await?;
        }
    }
    Ok(stale)
}

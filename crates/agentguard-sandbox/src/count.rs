//! The run's view of the audit log: every event of the run's proxy gets `run` = the
//! container's name, goes on to the run's sink (if any), and is counted.
//!
//! A run cannot flood the host's audit log: a refused or failed CONNECT whose decision, reason
//! and target repeat within [`MERGE_WINDOW`] is not written again but counted, and written as
//! one event with `repeated` = N when the window ends (the sandbox flushes every window while
//! the run lives, and at its end). Past [`MAX_REFUSAL_EVENTS`] refusal events in one run,
//! further refusals are only counted, by decision and reason, and written at the run's end as
//! one event each with `repeated` and `summarized` = true. Allowed connects and tunnel closes
//! are always written one by one (each is a tunnel the run really had). Nothing is dropped:
//! every refusal is in an event or in a count an event carries, and the run's counts
//! (`--json`, MCP) are taken before any merging, so they are exact.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentguard_audit::{AuditSink, Decision, Event, Kind, Receipt};

/// How long identical refusals of one run are merged into one event.
pub const MERGE_WINDOW: Duration = Duration::from_secs(2);
/// The most refusal events one run writes before it only counts them (written at its end).
pub const MAX_REFUSAL_EVENTS: u64 = 1000;

pub use crate::tally::EgressCounts;
use crate::tally::Tally;

/// What makes two refusals the same: decision, reason, target.
type Key = (&'static str, String, String);

/// Refusals seen but not yet written.
#[derive(Default)]
struct Merging {
    /// Refusal events written so far.
    written: u64,
    /// Per key: the latest event, how many it stands for, and when its window began.
    pending: BTreeMap<Key, (Event, u64, Instant)>,
    /// Keys whose first event was written, with when their window began.
    open: BTreeMap<Key, Instant>,
    /// Past the cap: per decision and reason, the latest event and the count.
    summary: BTreeMap<(&'static str, String), (Event, u64)>,
}

/// Tags, forwards, counts and merges the events of one run's proxy: the sandbox's own, and
/// the CLI's for a run on a cluster, whose proxy's events come back through its pod's log.
pub struct RunSink {
    inner: Option<Arc<dyn AuditSink>>,
    run: String,
    tally: Tally,
    seq: AtomicU64,
    merging: Mutex<Merging>,
}

impl RunSink {
    /// A sink for run `run`, forwarding to `inner` (or only counting, without one).
    pub fn new(inner: Option<Arc<dyn AuditSink>>, run: &str) -> RunSink {
        RunSink {
            inner,
            run: run.to_owned(),
            tally: Tally::default(),
            seq: AtomicU64::new(0),
            merging: Mutex::new(Merging::default()),
        }
    }

    /// The requests allowed and refused so far, exact (taken before any merging).
    pub fn counts(&self) -> EgressCounts {
        self.tally.counts()
    }

    fn write(&self, event: Event) -> agentguard_audit::Result<Receipt> {
        let event = event.subject("run", self.run.as_str());
        match &self.inner {
            Some(sink) => sink.record(event),
            // No log configured: counted only, with a local sequence number.
            None => Ok(Receipt {
                seq: self.seq.fetch_add(1, Ordering::Relaxed),
                hash: String::new(),
            }),
        }
    }

    /// Writes the merged refusals whose window has ended (`all`: every one, and the summary:
    /// the run is over).
    pub fn flush(&self, all: bool) -> agentguard_audit::Result<()> {
        let now = Instant::now();
        let (due, summary) = {
            let mut merging = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
            let keys: Vec<Key> = merging
                .pending
                .iter()
                .filter(|(_, (_, _, since))| all || now.duration_since(*since) >= MERGE_WINDOW)
                .map(|(key, _)| key.clone())
                .collect();
            let due: Vec<(Event, u64)> = keys
                .iter()
                .filter_map(|key| merging.pending.remove(key))
                .map(|(event, n, _)| (event, n))
                .collect();
            merging
                .open
                .retain(|_, since| !all && now.duration_since(*since) < MERGE_WINDOW);
            merging.written += due.len() as u64;
            let summary = if all {
                std::mem::take(&mut merging.summary).into_values().collect()
            } else {
                Vec::new()
            };
            (due, summary)
        };
        for (event, n) in due {
            self.write(event.data("repeated", n))?;
        }
        for (event, n) in summary {
            self.write(event.data("repeated", n).data("summarized", true))?;
        }
        Ok(())
    }

    /// Drives `run` to its end, writing the merged refusals at least once a window meanwhile.
    pub async fn flushing<F: std::future::Future>(&self, run: F) -> F::Output {
        tokio::pin!(run);
        let mut every = tokio::time::interval(MERGE_WINDOW);
        loop {
            tokio::select! {
                outcome = &mut run => return outcome,
                _ = every.tick() => {
                    if let Err(e) = self.flush(false) {
                        tracing::error!(error = %e, "recording the run's merged refusals failed");
                    }
                }
            }
        }
    }

    /// A refusal: written, merged into its window's count, or (past the cap) summarized.
    fn refusal(&self, event: Event) -> agentguard_audit::Result<Receipt> {
        let decision = event.decision.as_str();
        // A CONNECT's target, or a route request's route.
        let target = ["target", "route"]
            .iter()
            .find_map(|key| event.subject.get(*key).and_then(|t| t.as_str()));
        let key: Key = (
            decision,
            event.reason.clone(),
            target.unwrap_or("").to_owned(),
        );
        let now = Instant::now();
        {
            let mut merging = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
            if merging.written >= MAX_REFUSAL_EVENTS {
                let group = (decision, event.reason.clone());
                let entry = merging.summary.entry(group).or_insert((event, 0));
                entry.1 += 1;
                return Ok(self.merged_receipt());
            }
            let open = merging
                .open
                .get(&key)
                .is_some_and(|since| now.duration_since(*since) < MERGE_WINDOW);
            if open {
                let entry = merging
                    .pending
                    .entry(key)
                    .or_insert((event.clone(), 0, now));
                entry.0 = event;
                entry.1 += 1;
                return Ok(self.merged_receipt());
            }
            merging.open.insert(key, now);
            merging.written += 1;
        }
        self.write(event)
    }

    /// The receipt of an event merged into a later one: it has no line of its own yet.
    fn merged_receipt(&self) -> Receipt {
        Receipt {
            seq: self.seq.load(Ordering::Relaxed),
            hash: String::new(),
        }
    }
}

impl AuditSink for RunSink {
    fn record(&self, event: Event) -> agentguard_audit::Result<Receipt> {
        if !matches!(event.kind, Kind::EgressConnect | Kind::EgressRoute) {
            return self.write(event);
        }
        self.tally.count(&event);
        match event.decision {
            Decision::Allow => self.write(event),
            Decision::Deny | Decision::Error => self.refusal(event),
        }
    }
}

impl Drop for RunSink {
    /// A run whose future was dropped (a signal, a cancelled call) still writes what it merged.
    fn drop(&mut self) {
        if let Err(e) = self.flush(true) {
            tracing::error!(error = %e, run = %self.run, "recording the run's merged refusals failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use agentguard_audit::{AuditSink, Decision, Event, MemorySink};

    use super::{MAX_REFUSAL_EVENTS, RunSink};

    #[test]
    fn connects_are_counted_and_every_event_names_the_run() {
        let memory = Arc::new(MemorySink::new(None));
        let sink = RunSink::new(
            Some(memory.clone() as Arc<dyn AuditSink>),
            "agentguard-1-2-3",
        );
        for (decision, reason) in [
            (Decision::Allow, "ok"),
            (Decision::Deny, "domain_not_allowed"),
            (Decision::Error, "dns_error"),
            (Decision::Allow, "ok"),
        ] {
            sink.record(Event::egress_connect(decision, reason, "a.test:443", "c"))
                .unwrap();
        }
        sink.record(Event::egress_close("client_closed", "a.test:443", "c"))
            .unwrap();
        let counts = sink.counts();
        assert_eq!((counts.allowed, counts.denied), (2, 2));
        let refused: Vec<(&str, &str, u64)> = counts
            .refused
            .iter()
            .map(|t| (t.target.as_str(), t.reason.as_str(), t.count))
            .collect();
        assert_eq!(
            refused,
            [
                ("a.test:443", "dns_error", 1),
                ("a.test:443", "domain_not_allowed", 1)
            ]
        );
        let records = memory.records();
        assert_eq!(records.len(), 5);
        assert!(
            records
                .iter()
                .all(|r| r.subject["run"] == "agentguard-1-2-3"),
            "{records:?}"
        );
    }

    /// A flood of the same refusal is one event now and one with the count at the end; a
    /// flood of ever-new targets is capped and summarized; the counts stay exact and every
    /// refusal is in an event or in a count.
    #[test]
    fn a_flood_of_refusals_is_merged_and_capped_and_nothing_is_lost() {
        let memory = Arc::new(MemorySink::new(None));
        let sink = RunSink::new(Some(memory.clone() as Arc<dyn AuditSink>), "run-1");
        let deny =
            |target: &str| Event::egress_connect(Decision::Deny, "domain_not_allowed", target, "c");
        for _ in 0..50_000 {
            sink.record(deny("evil.test:443")).unwrap();
        }
        let distinct = MAX_REFUSAL_EVENTS as usize + 500;
        for i in 0..distinct {
            sink.record(deny(&format!("h{i}.test:443"))).unwrap();
        }
        sink.flush(true).unwrap();
        let records = memory.records();
        assert!(records.len() < 1100, "{} events", records.len());
        let stands_for = |r: &agentguard_audit::Record| {
            r.data.get("repeated").and_then(|n| n.as_u64()).unwrap_or(1)
        };
        let same: u64 = records
            .iter()
            .filter(|r| r.subject["target"] == "evil.test:443")
            .map(stands_for)
            .sum();
        assert_eq!(same, 50_000, "every refusal of the flood is counted");
        let total: u64 = records.iter().map(stands_for).sum();
        assert_eq!(total, 50_000 + distinct as u64, "nothing is lost");
        assert!(
            records
                .iter()
                .any(|r| r.data.get("summarized").is_some_and(|s| s == true)),
            "past the cap a summary"
        );
        assert_eq!(sink.counts().denied, 50_000 + distinct as u64, "exact");
    }
}

//! The run's view of the audit log: every event of the run's proxy gets `run` = the
//! container's name, goes on to the run's sink (if any), and is counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentguard_audit::{AuditSink, Decision, Event, Kind, Receipt};

/// How many CONNECT requests the run's proxy allowed and refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EgressCounts {
    /// Tunnels opened.
    pub allowed: u64,
    /// Requests refused, or that failed (a name that did not resolve, a dial that failed).
    pub denied: u64,
}

/// Tags, forwards and counts the events of one run's proxy.
pub(crate) struct RunSink {
    inner: Option<Arc<dyn AuditSink>>,
    run: String,
    allowed: AtomicU64,
    denied: AtomicU64,
    seq: AtomicU64,
}

impl RunSink {
    pub(crate) fn new(inner: Option<Arc<dyn AuditSink>>, run: &str) -> RunSink {
        RunSink {
            inner,
            run: run.to_owned(),
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    pub(crate) fn counts(&self) -> EgressCounts {
        EgressCounts {
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
        }
    }
}

impl AuditSink for RunSink {
    fn record(&self, event: Event) -> agentguard_audit::Result<Receipt> {
        if event.kind == Kind::EgressConnect {
            let counter = match event.decision {
                Decision::Allow => &self.allowed,
                Decision::Deny | Decision::Error => &self.denied,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use agentguard_audit::{AuditSink, Decision, Event, MemorySink};

    use super::{EgressCounts, RunSink};

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
        assert_eq!(
            sink.counts(),
            EgressCounts {
                allowed: 2,
                denied: 2
            }
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
}

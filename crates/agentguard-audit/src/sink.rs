//! The seam every other crate records through: one small trait, and an in-memory sink.
//!
//! The container executor, the fetcher and the egress proxy depend on [`AuditSink`] only,
//! never on the file format, so tests can pass a [`MemorySink`] and the CLI a file log.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::chain::{Chain, Key};
use crate::error::{Error, Result};
use crate::event::{Event, Record};

/// What a sink returns once an event is recorded with the sink's durability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The event's sequence number.
    pub seq: u64,
    /// The event's hash (the chain head after it).
    pub hash: String,
}

/// What [`AuditSink::try_record_now`] did.
#[derive(Debug)]
pub enum Attempt {
    /// Recorded, or failed, as [`AuditSink::record`] would have.
    Done(Result<Receipt>),
    /// Not tried, since recording would have waited: the event, handed back.
    WouldWait(Event),
}

/// Records decisions. Implementations never interleave events and never reuse a sequence
/// number; `record` returns only once the event is as durable as the sink promises.
pub trait AuditSink: Send + Sync {
    /// Records one event.
    fn record(&self, event: Event) -> Result<Receipt>;

    /// Records `event` only if that needs no wait: no lock another thread or process holds, no
    /// `fsync`, at most the sink's own work and one write to the operating system, which an
    /// event-loop thread may do. Otherwise hands the event back, for [`AuditSink::record`] on
    /// a thread that may block. The default hands every event back.
    fn try_record_now(&self, event: Event) -> Attempt {
        Attempt::WouldWait(event)
    }
}

impl<T: AuditSink + ?Sized> AuditSink for Arc<T> {
    fn record(&self, event: Event) -> Result<Receipt> {
        (**self).record(event)
    }

    fn try_record_now(&self, event: Event) -> Attempt {
        (**self).try_record_now(event)
    }
}

/// An in-memory sink for tests: the same chain and line format as the file log. It also
/// refuses an event whose known key has the wrong type ([`crate::KEYS`]), so every test that
/// records through it checks the key table.
#[derive(Debug)]
pub struct MemorySink {
    state: Mutex<(Chain, Vec<String>)>,
    recorded: Condvar,
}

impl Default for MemorySink {
    fn default() -> Self {
        MemorySink::new(None)
    }
}

impl MemorySink {
    /// An empty sink, signing with `key` when given.
    pub fn new(key: Option<Key>) -> MemorySink {
        MemorySink {
            state: Mutex::new((Chain::new(key), Vec::new())),
            recorded: Condvar::new(),
        }
    }

    /// The lines recorded so far, each ending in `\n`.
    pub fn lines(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .clone()
    }

    /// Waits until `done` holds for the records (checked after every event), for at most
    /// `within`; returns the records, or `None` when time ran out.
    pub fn wait_until(
        &self,
        within: Duration,
        done: impl Fn(&[Record]) -> bool,
    ) -> Option<Vec<Record>> {
        let deadline = Instant::now() + within;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let records: Vec<Record> = state
                .1
                .iter()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect();
            if done(&records) {
                return Some(records);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            state = self
                .recorded
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The records so far.
    pub fn records(&self) -> Vec<Record> {
        self.lines()
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl AuditSink for MemorySink {
    fn record(&self, event: Event) -> Result<Receipt> {
        if let Some((key, expected)) = crate::event::mistyped_key(&event) {
            return Err(Error::Schema {
                key: key.to_owned(),
                expected,
            });
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let sealed = state.0.seal(&event, SystemTime::now())?;
        state.1.push(sealed.line);
        self.recorded.notify_all();
        Ok(Receipt {
            seq: sealed.seq,
            hash: sealed.hash,
        })
    }

    /// Memory only: always at once.
    fn try_record_now(&self, event: Event) -> Attempt {
        Attempt::Done(self.record(event))
    }
}

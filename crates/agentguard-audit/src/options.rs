//! How a log is opened: the durability of each append, the HMAC key, and what a repair did.

use std::time::Duration;

use crate::chain::Key;

/// How durable an event is when `record` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// In a memory buffer; written on a short interval, when the buffer fills, and at
    /// shutdown. A crash of the process loses up to one interval of events.
    Buffered,
    /// Written to the operating system (one `write` per event): survives a crash of the
    /// process, not of the machine.
    Flush,
    /// Written and `fdatasync`ed, with concurrent writers sharing each sync (group commit):
    /// survives a crash of the machine.
    Fsync,
}

/// Options for [`AuditLog::open`].
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// The durability of each `record` (default: [`Durability::Flush`]).
    pub durability: Durability,
    /// Sign every record with HMAC-SHA256 under this key.
    pub key: Option<Key>,
    /// How often buffered events are written (default 100 ms).
    pub flush_interval: Duration,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            durability: Durability::Flush,
            key: None,
            flush_interval: Duration::from_millis(100),
        }
    }
}

impl LogOptions {
    /// Default options with this durability.
    pub fn with_durability(durability: Durability) -> LogOptions {
        LogOptions {
            durability,
            ..LogOptions::default()
        }
    }
}

/// What [`AuditLog::repair`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// Bytes of torn tail removed (0 when the log was intact).
    pub removed_bytes: u64,
    /// The 1-based line number of the torn line, when there was one.
    pub line: Option<u64>,
    /// The sequence number of the `log_repaired` record appended, when there was a repair.
    pub recorded_seq: Option<u64>,
    /// The torn line was a complete record lacking only its newline, which was restored.
    pub completed: bool,
}

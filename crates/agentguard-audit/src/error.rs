//! Error types for agentguard-audit.

use std::path::PathBuf;

use crate::problem::Problem;

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while opening, writing or repairing a log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened, read, written or synced.
    #[error("audit log {path}: {action} failed", path = path.display())]
    Io {
        /// The log file.
        path: PathBuf,
        /// What was being done (`open`, `write`, `fsync`, ...).
        action: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The path names something other than a regular file (a symbolic link, a device, a
    /// FIFO, a directory): events written there could vanish or go elsewhere.
    #[error("audit log {path} is {what}, not a regular file; name a regular file (it is created if it does not exist)", path = path.display())]
    NotRegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },
    /// The file is shorter than this writer knew it to be: someone truncated it.
    #[error("audit log {path} shrank from {expected} to {found} bytes while open; refusing to append: keep it as evidence", path = path.display())]
    Shrunk {
        /// The log file.
        path: PathBuf,
        /// The length this writer knew.
        expected: u64,
        /// The length found.
        found: u64,
    },
    /// The last line was cut short by a crash; appending would bury it.
    #[error("audit log {path}: {problem}; refusing to append: run `agentguard audit repair {path}` to truncate the torn tail (the repair is recorded in the log)", path = path.display())]
    TornTail {
        /// The log file.
        path: PathBuf,
        /// Where and what.
        problem: Problem,
    },
    /// The existing log does not verify (tampering or a foreign file); appending would hide it.
    #[error("audit log {path} does not verify: {problem}; refusing to append: keep it as evidence and start a new log", path = path.display())]
    Corrupt {
        /// The log file.
        path: PathBuf,
        /// The first bad line and why.
        problem: Problem,
    },
    /// The existing log and the key disagree (signed log without a key, or the reverse).
    #[error("audit log {path}: {reason}", path = path.display())]
    KeyMismatch {
        /// The log file.
        path: PathBuf,
        /// What disagrees and what to do.
        reason: String,
    },
    /// An earlier write failed, so the chain's state on disk is unknown; nothing more is appended.
    #[error("audit log {path} stopped accepting events after an earlier write failure ({cause}); reopen it (a torn tail will be reported and can be repaired)", path = path.display())]
    Poisoned {
        /// The log file.
        path: PathBuf,
        /// The first failure.
        cause: String,
    },
    /// An event's key has another type than the key table says (see [`crate::KEYS`]).
    #[error("audit event key `{key}` must be of type {expected:?}")]
    Schema {
        /// The key.
        key: String,
        /// The type the table gives it.
        expected: crate::ValueType,
    },
    /// The event would not fit on one line of the log; nothing was written.
    #[error(
        "the audit event is {bytes} bytes long as a line; at most {limit} are allowed (shorten its fields)"
    )]
    EventTooLarge {
        /// The line's length.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// An audit stream (stdout, for a follower) could not be written.
    #[error("the audit stream on stdout: write failed; its follower gets no more events")]
    Stream {
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The HMAC key is unusable.
    #[error("the audit HMAC key must be at least {min} bytes long (got {len})")]
    WeakKey {
        /// Minimum length.
        min: usize,
        /// Length given.
        len: usize,
    },
}

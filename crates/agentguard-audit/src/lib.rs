//! The audit trail: one JSON object per line for every decision, chained by SHA-256 so that an
//! edited, deleted, inserted or reordered line is detected, optionally signed with HMAC-SHA256,
//! and a streaming verifier that names the first bad line.
//!
//! It exists so that a reviewer can trust, after the fact, what the other layers decided.
//! Other crates depend only on the [`AuditSink`] trait (and tests on [`MemorySink`]), never on
//! the file format, which lives in [`AuditLog`] and is documented there and in docs/audit.md.

#![warn(missing_docs)]

mod chain;
mod commit;
mod digest;
mod error;
mod event;
mod file;
mod keys;
mod log;
mod options;
mod problem;
mod provenance;
mod sink;
mod stream;
mod time;
mod verify;

pub use agentguard_policy::is_hidden;
pub use chain::{GENESIS, Key, MAX_LINE_BYTES, MIN_KEY_LEN};
pub use error::{Error, Result};
pub use event::{
    Decision, Escaped, Event, KEYS, Kind, MAX_CLIENT_TEXT, MAX_RECORDED_VALUE, Record,
    SCHEMA_VERSION, ValueType, capped, error_chain, mistyped_key, params_json, recorded_text,
};
pub use file::open_regular;
pub use log::AuditLog;
pub use options::{Durability, LogOptions, Repair};
pub use problem::{Problem, ProblemKind};
pub use provenance::{AGENTGUARD_VERSION, canonical_sha256, invoker, sha256_hex};
pub use sink::{Attempt, AuditSink, MemorySink, Receipt};
pub use stream::{
    LISTENING_PREFIX, Read, STREAM_VERSION, StreamReader, StreamSink, StreamSummary, note_line,
};
pub use time::parse_millis;
pub use verify::{Reader, Summary, verify};

#[cfg(test)]
mod tests;

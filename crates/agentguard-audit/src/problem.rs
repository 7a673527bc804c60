//! What can be wrong with one line of an audit log, and where.
//!
//! A leaf module with no other crate module beneath it: the verifier produces these values,
//! the log's open and repair report them inside [`crate::Error`], and neither has to import
//! the other to do so.

use std::fmt;

use crate::event::SCHEMA_VERSION;

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The last line has no newline: a write was cut short (crash mid-write).
    TornTail,
    /// The line is not a JSON object.
    BadJson(String),
    /// The object is not a record of this schema (missing, extra or mistyped fields).
    BadRecord(String),
    /// The schema version is not one this verifier knows.
    UnsupportedVersion(u64),
    /// The stored hash does not match the record's content: the line was edited.
    BadHash,
    /// The sequence number is not the next one: a line was deleted, inserted or moved.
    BadSequence {
        /// The sequence number expected here.
        expected: u64,
        /// The one found.
        found: u64,
    },
    /// `prev` is not the previous record's hash: a line was deleted, inserted or moved.
    BrokenChain,
    /// The line is not byte for byte the canonical serialization of the record it carries
    /// (duplicate or reordered keys, other escapes, whitespace).
    NotCanonical,
    /// The line is longer than the limit; it was not read whole.
    LineTooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The HMAC does not match: the record or the chain was rewritten without the key.
    BadSignature,
    /// A key was given (or earlier records are signed) but this record has no HMAC.
    MissingSignature,
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemKind::TornTail => f.write_str("torn tail: the last line is incomplete (a write was cut short)"),
            ProblemKind::BadJson(e) => write!(f, "bad JSON: {e}"),
            ProblemKind::BadRecord(e) => write!(f, "not an audit record: {e}"),
            ProblemKind::UnsupportedVersion(v) => write!(f, "unsupported schema version {v} (this verifier knows {SCHEMA_VERSION})"),
            ProblemKind::BadHash => f.write_str("bad hash: the content does not match its hash (the line was edited)"),
            ProblemKind::BadSequence { expected, found } => write!(
                f,
                "broken sequence: expected seq {expected}, found {found} (a line was deleted, inserted or moved)"
            ),
            ProblemKind::BrokenChain => f.write_str("broken chain: prev is not the previous line's hash (a line was deleted, inserted or moved)"),
            ProblemKind::NotCanonical => f.write_str("not canonical: the line is not exactly the writer's serialization of its record (duplicate or reordered keys, other escapes, or whitespace)"),
            ProblemKind::LineTooLong { limit } => write!(f, "line too long: more than {limit} bytes (not read whole)"),
            ProblemKind::BadSignature => f.write_str("bad signature: the HMAC does not match (rewritten without the key, or the wrong key)"),
            ProblemKind::MissingSignature => f.write_str("missing signature: this line has no HMAC"),
        }
    }
}

/// The first bad line of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line number.
    pub line: u64,
    /// Byte offset where the line starts (the repair truncates here for a torn tail).
    pub offset: u64,
    /// What is wrong.
    pub kind: ProblemKind,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.kind)
    }
}

impl std::error::Error for Problem {}

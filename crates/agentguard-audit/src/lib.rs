//! The audit trail: one JSON object per line for every decision, chained by SHA-256 so that an
//! edited, deleted or reordered line is detected, with a verifier.
//!
//! It exists so that a reviewer can trust what the other layers decided after the fact. Other
//! crates will depend on a small sink trait, never on the file format. Status: the log is the
//! subject of the audit issue and is not written yet; this crate is an empty placeholder until
//! then.

#![warn(missing_docs)]

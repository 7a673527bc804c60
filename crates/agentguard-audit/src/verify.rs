//! Streaming verification of an audit log: names the first bad line and why.
//!
//! The verifier reads one line at a time (memory does not grow with the file), recomputes each
//! record's hash from its canonical form, and checks the sequence, the chain and (with a key)
//! the HMAC. The first record must have `seq` 0 and the genesis `prev`, so deleting the first
//! line is detected. Deleting lines from the END of a log cannot be detected by a chain alone;
//! [`Summary::head`] is the value to keep elsewhere (see docs/audit.md).

use std::io::{BufRead, Read};

use serde_json::Value;

use crate::chain::{GENESIS, Key, MAX_LINE_BYTES, canonical, line};
use crate::digest::sha256_hex;
use crate::event::{Record, SCHEMA_VERSION};
use crate::problem::{Problem, ProblemKind};

/// What a verification (or the verified part of a log) established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Records that verified.
    pub events: u64,
    /// The hash of the last verified record (the genesis value for an empty log): keep it
    /// elsewhere to detect later truncation of the log's end.
    pub head: String,
    /// The next sequence number.
    pub next_seq: u64,
    /// Whether the records carry HMACs.
    pub signed: bool,
    /// Whether those HMACs were checked against a key.
    pub signatures_checked: bool,
    /// Bytes of the file that verified (the offset just past the last good line).
    pub good_bytes: u64,
}

/// Reads and verifies records one by one; stops after the first problem.
pub struct Reader<R> {
    inner: R,
    key: Option<Key>,
    summary: Summary,
    line: u64,
    buf: Vec<u8>,
    done: bool,
    /// Whether the log's first record (which decides if the log is signed) is behind us.
    decided: bool,
}

impl<R: BufRead> Reader<R> {
    /// A reader that checks HMACs when `key` is given.
    pub fn new(inner: R, key: Option<Key>) -> Reader<R> {
        let signatures_checked = key.is_some();
        Reader {
            inner,
            key,
            summary: Summary {
                events: 0,
                head: GENESIS.to_owned(),
                next_seq: 0,
                signed: signatures_checked,
                signatures_checked,
                good_bytes: 0,
            },
            line: 0,
            buf: Vec::with_capacity(512),
            done: false,
            decided: false,
        }
    }

    /// A reader that continues a log from its middle: the chain state after `lines` lines
    /// ending at byte `offset`, whose signing is already decided (signed iff `key` is given).
    pub(crate) fn continuing(
        inner: R,
        key: Option<Key>,
        next_seq: u64,
        head: &str,
        lines: u64,
        offset: u64,
    ) -> Reader<R> {
        let mut reader = Reader::new(inner, key);
        reader.summary.next_seq = next_seq;
        reader.summary.head = head.to_owned();
        reader.summary.good_bytes = offset;
        reader.line = lines;
        reader.decided = lines > 0;
        reader
    }

    /// What has verified so far.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    fn problem(&mut self, kind: ProblemKind) -> Option<Result<Record, Problem>> {
        self.done = true;
        Some(Err(Problem {
            line: self.line,
            offset: self.summary.good_bytes,
            kind,
        }))
    }

    fn check(&mut self) -> Result<Record, ProblemKind> {
        let text = &self.buf[..self.buf.len() - 1];
        let mut value: Value =
            serde_json::from_slice(text).map_err(|e| ProblemKind::BadJson(e.to_string()))?;
        let object = value
            .as_object_mut()
            .ok_or_else(|| ProblemKind::BadJson("the line is not a JSON object".into()))?;
        let hash = match object.remove("hash") {
            Some(Value::String(h)) => h,
            _ => {
                return Err(ProblemKind::BadRecord(
                    "missing or non-string `hash`".into(),
                ));
            }
        };
        let hmac = match object.remove("hmac") {
            None => None,
            Some(Value::String(h)) => Some(h),
            Some(_) => return Err(ProblemKind::BadRecord("non-string `hmac`".into())),
        };
        let mut canon = String::with_capacity(text.len());
        canonical(&value, &mut canon);
        // Only the writer's own serialization of what the line carries is accepted: no
        // duplicate or reordered keys, no other escapes, no whitespace.
        let canonical_line = match &value {
            Value::Object(fields) => line(fields, &hash, hmac.as_deref()),
            _ => String::new(),
        };
        let exact = canonical_line.as_bytes() == self.buf.as_slice();
        if let Value::Object(object) = &mut value {
            object.insert("hash".into(), Value::String(hash.clone()));
            if let Some(h) = &hmac {
                object.insert("hmac".into(), Value::String(h.clone()));
            }
        }
        let record: Record =
            serde_json::from_value(value).map_err(|e| ProblemKind::BadRecord(e.to_string()))?;
        if record.v != SCHEMA_VERSION {
            return Err(ProblemKind::UnsupportedVersion(record.v));
        }
        if !exact {
            return Err(ProblemKind::NotCanonical);
        }
        if sha256_hex(canon.as_bytes()) != hash {
            return Err(ProblemKind::BadHash);
        }
        if record.seq != self.summary.next_seq {
            return Err(ProblemKind::BadSequence {
                expected: self.summary.next_seq,
                found: record.seq,
            });
        }
        if record.prev != self.summary.head {
            return Err(ProblemKind::BrokenChain);
        }
        // The first record decides whether the log is signed; every record must agree.
        if !self.decided && self.key.is_none() {
            self.summary.signed = hmac.is_some();
        }
        self.decided = true;
        match (&hmac, self.summary.signed) {
            (None, true) => return Err(ProblemKind::MissingSignature),
            (Some(_), false) => {
                return Err(ProblemKind::BadRecord(
                    "an HMAC on a line of an unsigned log".into(),
                ));
            }
            _ => {}
        }
        if let (Some(key), Some(tag)) = (&self.key, &hmac)
            && !key.verify(canon.as_bytes(), tag)
        {
            return Err(ProblemKind::BadSignature);
        }
        Ok(record)
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Record, Problem>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.buf.clear();
        // Never more than one byte past the limit is read, so memory stays bounded.
        let limit = MAX_LINE_BYTES as u64 + 1;
        match (&mut self.inner)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
        {
            Ok(0) => {
                self.done = true;
                return None;
            }
            Ok(_) => {}
            Err(e) => {
                self.line += 1;
                return self.problem(ProblemKind::BadJson(format!("read error: {e}")));
            }
        }
        self.line += 1;
        if self.buf.len() > MAX_LINE_BYTES {
            return self.problem(ProblemKind::LineTooLong {
                limit: MAX_LINE_BYTES,
            });
        }
        if self.buf.last() != Some(&b'\n') {
            return self.problem(ProblemKind::TornTail);
        }
        match self.check() {
            Ok(record) => {
                self.summary.events += 1;
                self.summary.next_seq = record.seq + 1;
                self.summary.head.clone_from(&record.hash);
                self.summary.good_bytes += self.buf.len() as u64;
                Some(Ok(record))
            }
            Err(kind) => self.problem(kind),
        }
    }
}

/// Verifies a whole log: the summary, or the summary of the good prefix and the first problem.
pub fn verify<R: BufRead>(input: R, key: Option<Key>) -> Result<Summary, (Summary, Problem)> {
    let mut reader = Reader::new(input, key);
    while let Some(item) = reader.next() {
        if let Err(problem) = item {
            return Err((reader.summary.clone(), problem));
        }
    }
    Ok(reader.summary)
}

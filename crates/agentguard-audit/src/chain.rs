//! The hash chain: the canonical form of a record, its SHA-256 and optional HMAC, and sealing.
//!
//! The canonical form is what is hashed: the record as a JSON object without `hash` and
//! `hmac`, with object keys sorted by byte order at every depth, no whitespace, strings
//! escaped as serde_json escapes them, integers in decimal. It is written by hand here, not
//! left to a serializer's key order, so that no feature flag elsewhere in a build can change
//! what a hash covers. Each record's `prev` is the previous record's `hash`, so editing,
//! deleting, inserting or reordering any line breaks the chain; with an HMAC key, recomputing
//! the whole chain without the key is detected too.

use std::time::SystemTime;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::digest::{hex, sha256_hex};
use crate::error::{Error, Result};
use crate::event::{Event, SCHEMA_VERSION};

/// The longest line a log may hold, newline included: the writer refuses a larger event, and
/// the verifier refuses a longer line after reading at most one byte past it.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The shortest HMAC key accepted.
pub const MIN_KEY_LEN: usize = 16;

/// Writes the canonical JSON form of `value` to `out`.
pub(crate) fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => canonical_map(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => push_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

/// Writes the canonical JSON form of an object: keys sorted by byte order, no whitespace.
pub(crate) fn canonical_map(map: &Map<String, Value>, out: &mut String) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_string(key, out);
        out.push(':');
        canonical(&map[key], out);
    }
    out.push('}');
}

fn push_string(s: &str, out: &mut String) {
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// An HMAC-SHA256 key for signing or verifying.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key of at least [`MIN_KEY_LEN`] bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Key> {
        let bytes = bytes.into();
        if bytes.len() < MIN_KEY_LEN {
            return Err(Error::WeakKey {
                min: MIN_KEY_LEN,
                len: bytes.len(),
            });
        }
        Ok(Key(bytes))
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }

    pub(crate) fn sign(&self, canonical: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(canonical);
        hex(&mac.finalize().into_bytes())
    }

    /// Constant-time check of a hex tag.
    pub(crate) fn verify(&self, canonical: &[u8], tag_hex: &str) -> bool {
        let Some(tag) = unhex(tag_hex) else {
            return false;
        };
        let mut mac = self.mac();
        mac.update(canonical);
        mac.verify_slice(&tag).is_ok()
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The fields of a line, in reading order; `hash` and `hmac` follow them.
const LINE_FIELDS: [&str; 9] = [
    "v", "seq", "ts", "kind", "decision", "reason", "subject", "data", "prev",
];

/// The one serialization of a record as a line, ending in `\n`: the fields in reading order,
/// each value in canonical form, then `hash` and `hmac`. The writer produces it, and the
/// verifier accepts a line only if it is exactly this serialization of what it carries.
pub(crate) fn line(fields: &Map<String, Value>, hash: &str, hmac: Option<&str>) -> String {
    let mut line = String::with_capacity(512);
    line.push('{');
    for (i, key) in LINE_FIELDS.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        push_string(key, &mut line);
        line.push(':');
        canonical(fields.get(*key).unwrap_or(&Value::Null), &mut line);
    }
    line.push_str(",\"hash\":");
    push_string(hash, &mut line);
    if let Some(tag) = hmac {
        line.push_str(",\"hmac\":");
        push_string(tag, &mut line);
    }
    line.push_str("}\n");
    line
}

/// The running state of a chain: the next sequence number and the previous hash.
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    pub(crate) next_seq: u64,
    pub(crate) prev: String,
    pub(crate) key: Option<Key>,
}

/// One sealed event, ready to append.
pub(crate) struct Sealed {
    pub(crate) seq: u64,
    pub(crate) hash: String,
    /// The line, ending in `\n`.
    pub(crate) line: String,
}

impl Chain {
    pub(crate) fn new(key: Option<Key>) -> Chain {
        Chain {
            next_seq: 0,
            prev: GENESIS.to_owned(),
            key,
        }
    }

    /// Seals `event` at `now` and advances the chain; an event whose line would be longer
    /// than [`MAX_LINE_BYTES`] is refused and the chain does not move.
    pub(crate) fn seal(&mut self, event: &Event, now: SystemTime) -> Result<Sealed> {
        let seq = self.next_seq;
        let mut fields = Map::new();
        fields.insert("v".into(), SCHEMA_VERSION.into());
        fields.insert("seq".into(), seq.into());
        fields.insert("ts".into(), crate::time::rfc3339_millis(now).into());
        fields.insert("kind".into(), event.kind.as_str().into());
        fields.insert("decision".into(), event.decision.as_str().into());
        fields.insert("reason".into(), event.reason.clone().into());
        fields.insert("subject".into(), Value::Object(event.subject.clone()));
        fields.insert("data".into(), Value::Object(event.data.clone()));
        fields.insert("prev".into(), self.prev.clone().into());
        let mut canon = String::with_capacity(256);
        canonical_map(&fields, &mut canon);
        let hash = sha256_hex(canon.as_bytes());
        let hmac = self.key.as_ref().map(|k| k.sign(canon.as_bytes()));

        let line = line(&fields, &hash, hmac.as_deref());
        if line.len() > MAX_LINE_BYTES {
            return Err(Error::EventTooLarge {
                bytes: line.len(),
                limit: MAX_LINE_BYTES,
            });
        }
        self.next_seq += 1;
        self.prev.clone_from(&hash);
        Ok(Sealed { seq, hash, line })
    }
}

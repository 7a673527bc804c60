//! Replacing a route's secret in what goes back to the container, as it streams.
//!
//! The upstream is hostile: it may reflect the credential in any part of its answer, whole,
//! encoded, or in pieces. A [`Pattern`] is one byte string to hide (the secret, the rendered
//! header value, the base64 forms) and each of its bytes is matched in every form a common
//! encoder writes: the byte itself, `%HH` (either case), `\u00HH` (JSON), the JSON escapes
//! `\/`, `\\`, `\"`, and `+` for a space (form encoding); so `s3cr\/t` and `s3cr%2Ft` are the
//! secret `s3cr/t`. What counts as a leak:
//!
//! - a whole occurrence, anywhere: replaced by `[REDACTED]` (a prefix such as `Bearer ` is
//!   kept as sent, so the reader still sees what was redacted);
//! - mid-body, a piece that matches at least the pattern's `fragment` bytes and then
//!   differs (an error page that shows the first characters of the header): replaced;
//! - at the end of a body (or of a header value), a held tail that matched the pattern's
//!   `tail` bytes: replaced instead of sent, since an upstream that cuts its answer inside
//!   the secret would otherwise deliver that piece. After a prefix (`Bearer s`) one byte of
//!   the secret is enough; the bare secret needs [`MIN_TAIL`] bytes, or every header value
//!   that ends in the secret's first letter would be replaced.
//!
//! [`Redactor::push`] takes the body chunk by chunk and returns what may be sent now; it holds
//! back the tail from the first position where a match could still complete, since that
//! occurrence may end in the next chunk. An occurrence that began in bytes already sent would
//! have been decided there, so nothing of a secret leaves in two halves. Bytes that cannot
//! begin a pattern are never held, so a stream (server-sent events) arrives event by event.
//! [`Redactor::finish`] decides the held tail.

use base64::Engine as _;

/// What replaces a secret's bytes in everything sent back to the container.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// One byte string to hide, with where the secret begins in it (`Bearer ` precedes it in a
/// header value), how many matched bytes make a leaked piece mid-body, and at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    bytes: Vec<u8>,
    secret_from: usize,
    fragment: usize,
    tail: usize,
}

/// The fewest bytes of a secret that, shown mid-body and followed by something else, count as
/// a leaked piece (shorter secrets: the whole).
pub(crate) const MIN_FRAGMENT: usize = 8;

/// The fewest bytes of the bare secret that, ending a body or a header value, count as a
/// leaked piece (shorter secrets: the whole).
pub(crate) const MIN_TAIL: usize = 4;

/// The most matcher steps spent at one position; past it the position is treated as a leak
/// (only a secret made of many `%` or `\` could get there).
const STEP_BUDGET: usize = 4096;

impl Pattern {
    /// The secret itself (or an encoding of it alone): a piece of `MIN_FRAGMENT` bytes leaks.
    pub(crate) fn secret(bytes: Vec<u8>) -> Pattern {
        let fragment = MIN_FRAGMENT.min(bytes.len());
        let tail = MIN_TAIL.min(bytes.len());
        Pattern {
            bytes,
            secret_from: 0,
            fragment,
            tail,
        }
    }

    /// A value whose secret part begins at `secret_from` (`Bearer {secret}`): a piece leaks
    /// once it holds a byte of the secret and is `MIN_FRAGMENT` long (`Bearer s`).
    pub(crate) fn after(bytes: Vec<u8>, secret_from: usize) -> Pattern {
        let fragment = (secret_from + 1).max(MIN_FRAGMENT).min(bytes.len());
        let tail = (secret_from + 1).max(MIN_TAIL).min(bytes.len());
        Pattern {
            bytes,
            secret_from,
            fragment,
            tail,
        }
    }
}

/// The base64 forms of `bytes` (standard and URL-safe alphabets, without padding, which an
/// encoder of longer data would not write at the same place).
pub(crate) fn base64_forms(bytes: &[u8]) -> [Vec<u8>; 2] {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    [
        STANDARD_NO_PAD.encode(bytes).into_bytes(),
        URL_SAFE_NO_PAD.encode(bytes).into_bytes(),
    ]
}

/// The patterns of a secret alone: itself and its base64 forms.
pub(crate) fn secret_patterns(secret: &[u8]) -> Vec<Pattern> {
    let mut patterns = vec![Pattern::secret(secret.to_vec())];
    patterns.extend(base64_forms(secret).map(Pattern::secret));
    patterns
}

/// What matching one pattern at one position found. Offsets are relative to the position;
/// `keep` is where the secret's part begins (the bytes before it, `Bearer `, are kept).
#[derive(Debug, Default, Clone, Copy)]
struct Found {
    /// A whole occurrence: (end, keep).
    whole: Option<(usize, usize)>,
    /// The input ended inside a possible occurrence: (pattern bytes matched, keep).
    open: Option<(usize, usize)>,
    /// The longest piece that matched and then differed: (pattern bytes, end, keep).
    piece: Option<(usize, usize, usize)>,
}

/// Pushes onto `out` the length of each encoded form of `byte` that `rest` begins with;
/// returns true when `rest` ends inside one of them (it may still become one).
fn forms(byte: u8, rest: &[u8], out: &mut Vec<usize>) -> bool {
    let mut open = false;
    let mut check = |form: &[u8], case_free: bool| {
        let n = form.len().min(rest.len());
        let same = if case_free {
            rest[..n].eq_ignore_ascii_case(&form[..n])
        } else {
            rest[..n] == form[..n]
        };
        if same {
            if n == form.len() {
                out.push(n);
            } else {
                open = true;
            }
        }
    };
    check(&[byte], false);
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let (hi, lo) = (HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]);
    check(&[b'%', hi, lo], true);
    check(&[b'\\', b'u', b'0', b'0', hi, lo], true);
    match byte {
        b'/' | b'\\' | b'"' => check(&[b'\\', byte], false),
        b' ' => check(b"+", false),
        _ => {}
    }
    open
}

/// The bytes an occurrence of any of `patterns` can begin with, in any encoded form.
fn first_bytes(patterns: &[Pattern]) -> [bool; 256] {
    let mut table = [false; 256];
    for p in patterns {
        if let Some(&b) = p.bytes.first() {
            table[usize::from(b)] = true;
            if b == b' ' {
                table[usize::from(b'+')] = true;
            }
            table[usize::from(b'%')] = true;
            table[usize::from(b'\\')] = true;
        }
    }
    table
}

/// One step of the search: pattern bytes matched, input offset, where the secret began.
type Step = (usize, usize, usize);

/// Every way `pattern` can match at the start of `hay` (depth-first over the encoded forms).
fn find(pattern: &Pattern, hay: &[u8], stack: &mut Vec<Step>) -> Found {
    let mut found = Found::default();
    stack.clear();
    stack.push((0, 0, 0));
    let mut steps = 0;
    let mut lens = Vec::with_capacity(4);
    while let Some((i, at, keep)) = stack.pop() {
        steps += 1;
        if steps > STEP_BUDGET {
            // Fail closed: what was scanned is treated as a whole occurrence.
            found.whole = Some((found.whole.map_or(0, |w| w.0).max(at).max(1), 0));
            return found;
        }
        if i == pattern.bytes.len() {
            if found.whole.is_none_or(|w| at > w.0) {
                found.whole = Some((at, keep));
            }
            continue;
        }
        if at == hay.len() {
            if found.open.is_none_or(|o| i > o.0) {
                found.open = Some((i, keep));
            }
            continue;
        }
        lens.clear();
        if forms(pattern.bytes[i], &hay[at..], &mut lens) && found.open.is_none_or(|o| i > o.0) {
            found.open = Some((i, keep));
        }
        if lens.is_empty() && i > 0 && found.piece.is_none_or(|p| i > p.0) {
            found.piece = Some((i, at, keep));
        }
        for &n in &lens {
            let next = i + 1;
            let keep = if next == pattern.secret_from {
                at + n
            } else {
                keep
            };
            stack.push((next, at + n, keep));
        }
    }
    found
}

/// How the scan treats a possible occurrence that reaches the end of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// More input may follow: hold it back.
    Hold,
    /// The input is complete: a held piece of the secret is replaced.
    Final,
}

/// Scans `buf` into `out`: returns where the held tail begins (`buf.len()` when nothing is
/// held; always `buf.len()` for [`End::Final`]).
fn scan(patterns: &[Pattern], buf: &[u8], out: &mut Vec<u8>, end: End) -> usize {
    let starts = first_bytes(patterns);
    let mut stack = Vec::new();
    let mut at = 0;
    let mut copied = 0;
    'outer: while at < buf.len() {
        if !starts[usize::from(buf[at])] {
            at += 1;
            continue;
        }
        // The leak here, if any: (keep, end), the least kept and the furthest end.
        let mut leak: Option<(usize, usize)> = None;
        let mut widen = |keep: usize, to: usize| {
            leak = Some(leak.map_or((keep, to), |(k, e)| (k.min(keep), e.max(to))));
        };
        for pattern in patterns {
            let f = find(pattern, &buf[at..], &mut stack);
            if let Some((to, keep)) = f.whole {
                widen(keep, to);
                continue;
            }
            if let Some((m, keep)) = f.open {
                match end {
                    End::Hold => {
                        out.extend_from_slice(&buf[copied..at]);
                        return at;
                    }
                    End::Final if m >= pattern.tail => {
                        widen(keep, buf.len() - at);
                        continue;
                    }
                    End::Final => {}
                }
            }
            if let Some((m, to, keep)) = f.piece
                && m >= pattern.fragment
                && m > pattern.secret_from
            {
                widen(keep, to);
            }
        }
        if let Some((keep, to)) = leak {
            out.extend_from_slice(&buf[copied..at + keep]);
            out.extend_from_slice(REDACTED);
            at += to.max(keep + 1);
            copied = at;
            continue 'outer;
        }
        at += 1;
    }
    out.extend_from_slice(&buf[copied..]);
    buf.len()
}

/// A streaming replacer of [`Pattern`]s.
pub(crate) struct Redactor {
    patterns: Vec<Pattern>,
    held: Vec<u8>,
}

impl Redactor {
    pub(crate) fn new(patterns: Vec<Pattern>) -> Redactor {
        let patterns = patterns
            .into_iter()
            .filter(|p| !p.bytes.is_empty())
            .collect();
        Redactor {
            patterns,
            held: Vec::new(),
        }
    }

    /// What of `chunk` (after what was held back) may be sent now.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(buf.len());
        let hold_from = scan(&self.patterns, &buf, &mut out, End::Hold);
        self.held = buf[hold_from..].to_vec();
        out
    }

    /// The held tail, decided as the end of the body: a piece of the secret is replaced.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::with_capacity(held.len());
        scan(&self.patterns, &held, &mut out, End::Final);
        out
    }
}

/// `text` with every occurrence and every piece replaced, as a complete input (header values).
pub(crate) fn redact_all(patterns: &[Pattern], text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    scan(patterns, text, &mut out, End::Final);
    out
}

#[cfg(test)]
mod tests;

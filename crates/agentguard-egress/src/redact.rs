//! Replacing a route's secret in what goes back to the container, as it streams.
//!
//! [`Redactor::push`] takes the body chunk by chunk and returns what may be sent now: every
//! whole occurrence of a pattern replaced by `[REDACTED]`, and the longest tail that begins
//! some pattern held back, since that occurrence may end in the next chunk. An occurrence
//! that began in bytes already sent would either have ended inside the buffer, where it was
//! found, or be such a tail; so nothing of a secret ever leaves in two halves. Bytes that
//! cannot begin a secret are never held, so a stream (server-sent events) arrives event by
//! event. [`Redactor::finish`] releases the rest.

use crate::route::REDACTED;

/// A streaming replacer of byte patterns (non-empty).
pub(crate) struct Redactor {
    patterns: Vec<Vec<u8>>,
    held: Vec<u8>,
}

impl Redactor {
    pub(crate) fn new(patterns: Vec<Vec<u8>>) -> Redactor {
        let patterns = patterns.into_iter().filter(|p| !p.is_empty()).collect();
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
        let rest = replace_whole(&self.patterns, &buf, &mut out);
        let split = buf.len() - rest;
        let hold_from = buf.len() - self.beginning(&buf[split..]);
        out.extend_from_slice(&buf[split..hold_from]);
        self.held = buf[hold_from..].to_vec();
        out
    }

    /// The length of the longest tail of `bytes` that is the start of a pattern (shorter
    /// than it: a whole one was replaced already).
    fn beginning(&self, bytes: &[u8]) -> usize {
        let longest = self.patterns.iter().map(Vec::len).max().unwrap_or(1);
        (1..longest.min(bytes.len() + 1))
            .rev()
            .find(|k| {
                let tail = &bytes[bytes.len() - k..];
                self.patterns.iter().any(|p| p.starts_with(tail))
            })
            .unwrap_or(0)
    }

    /// The bytes still held back (they hold no whole pattern).
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

/// Copies `buf` into `out` with every whole occurrence replaced, up to the end of the last
/// occurrence; returns how many bytes after it were not copied.
fn replace_whole(patterns: &[Vec<u8>], buf: &[u8], out: &mut Vec<u8>) -> usize {
    let mut at = 0;
    while let Some((start, len)) = earliest(patterns, &buf[at..]) {
        out.extend_from_slice(&buf[at..at + start]);
        out.extend_from_slice(REDACTED);
        at += start + len;
    }
    buf.len() - at
}

/// The earliest whole occurrence of any pattern (the longest at a tie): (offset, length).
fn earliest(patterns: &[Vec<u8>], haystack: &[u8]) -> Option<(usize, usize)> {
    patterns
        .iter()
        .filter(|p| !p.is_empty() && p.len() <= haystack.len())
        .filter_map(|p| {
            haystack
                .windows(p.len())
                .position(|w| w == p.as_slice())
                .map(|i| (i, p.len()))
        })
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
}

/// `text` with every occurrence replaced (for header values).
pub(crate) fn redact_all(patterns: &[Vec<u8>], text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let rest = replace_whole(patterns, text, &mut out);
    out.extend_from_slice(&text[text.len() - rest..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(patterns: &[Vec<u8>], chunks: &[&[u8]]) -> Vec<u8> {
        let mut r = Redactor::new(patterns.to_vec());
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(r.push(chunk));
        }
        out.extend(r.finish());
        out
    }

    #[test]
    fn a_secret_split_across_chunks_is_replaced() {
        let p = vec![b"s3cr3t-token".to_vec()];
        let whole = b"auth=s3cr3t-token; again s3cr3t-token.";
        let want = b"auth=[REDACTED]; again [REDACTED].".to_vec();
        for i in 0..whole.len() {
            for j in i..whole.len() {
                let got = stream(&p, &[&whole[..i], &whole[i..j], &whole[j..]]);
                assert_eq!(got, want, "cut at {i} and {j}");
            }
        }
        let bytewise: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(stream(&p, &bytewise), want);
    }

    #[test]
    fn bytes_that_only_begin_a_secret_are_released_at_the_end() {
        let p = vec![b"s3cr3t".to_vec()];
        assert_eq!(stream(&p, &[b"abc s3c", b"r3"]), b"abc s3cr3".to_vec());
        assert_eq!(stream(&p, &[b""]), Vec::<u8>::new());
    }

    #[test]
    fn bytes_that_cannot_begin_a_secret_are_sent_at_once() {
        let mut r = Redactor::new(vec![b"s3cr3t".to_vec()]);
        assert_eq!(r.push(b"data: one\n\n"), b"data: one\n\n".to_vec());
        assert_eq!(r.push(b"data: s3"), b"data: ".to_vec());
        assert_eq!(r.push(b"x\n\n"), b"s3x\n\n".to_vec());
        assert_eq!(r.finish(), Vec::<u8>::new());
    }

    #[test]
    fn several_patterns_and_headers() {
        let p = vec![b"tok".to_vec(), b"dXNlcjp0b2s=".to_vec()];
        assert_eq!(
            redact_all(&p, b"Basic dXNlcjp0b2s= tok"),
            b"Basic [REDACTED] [REDACTED]".to_vec()
        );
        assert_eq!(
            stream(&p, &[b"dXNlcjp0", b"b2s=!"]),
            b"[REDACTED]!".to_vec()
        );
    }
}

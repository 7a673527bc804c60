//! A command's output as a terminal may safely show it: nothing in it can act on the
//! terminal. Every escape sequence and control character (OSC 52 clipboard writes, titles,
//! screen clears, hyperlinks, cursor moves, backspaces), every C1 control, and every character
//! of the audit crate's hidden-character table (bidi controls, zero-width characters) is
//! written as visible text instead: C0 controls and DEL in caret form (`^[`, `^H`, `^?`),
//! other characters as `\u{..}`, bytes that are not UTF-8 as `\x{..}`. A carriage return
//! becomes a line break (so `\r` cannot overwrite a line, and `\r\n` stays one break); `\n`
//! and `\t` pass. Since the command can never write an escape sequence, the styled prefix of
//! agentguard's own lines on a terminal cannot be imitated by its output.
//!
//! The filter keeps its state across writes: a sequence or a UTF-8 character split between
//! two reads of the pipe is seen whole.

use std::io::{self, IsTerminal, Write};

/// A writer that neutralizes what it is given before passing it to `inner`.
pub struct Neutralized<W: Write> {
    inner: W,
    /// The start of a UTF-8 character the last write ended inside (at most 3 bytes).
    carry: Vec<u8>,
    /// The last write ended with `\r`, already written as a line break.
    after_cr: bool,
}

impl<W: Write> Neutralized<W> {
    /// Neutralizes everything written to `inner`.
    pub fn new(inner: W) -> Neutralized<W> {
        Neutralized {
            inner,
            carry: Vec::new(),
            after_cr: false,
        }
    }

    /// Appends the neutral form of `data` to `out`, keeping an incomplete character.
    fn render(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let mut input = std::mem::take(&mut self.carry);
        input.extend_from_slice(data);
        let mut rest = &input[..];
        while !rest.is_empty() {
            let (valid, bad) = match std::str::from_utf8(rest) {
                Ok(text) => (text, None),
                Err(e) => {
                    let text = std::str::from_utf8(&rest[..e.valid_up_to()]).unwrap_or_default();
                    (text, Some((e.valid_up_to(), e.error_len())))
                }
            };
            for c in valid.chars() {
                self.char(c, out);
            }
            match bad {
                None => break,
                Some((at, None)) => {
                    // An incomplete character at the end: wait for the next write.
                    self.carry.extend_from_slice(&rest[at..]);
                    break;
                }
                Some((at, Some(len))) => {
                    for byte in &rest[at..at + len] {
                        self.after_cr = false;
                        out.extend_from_slice(format!("\\x{{{byte:02x}}}").as_bytes());
                    }
                    rest = &rest[at + len..];
                }
            }
        }
    }

    fn char(&mut self, c: char, out: &mut Vec<u8>) {
        let after_cr = std::mem::replace(&mut self.after_cr, false);
        match c {
            // `\r\n` is one break, written when the `\r` came.
            '\n' if after_cr => {}
            '\n' | '\t' => out.push(c as u8),
            '\r' => {
                out.push(b'\n');
                self.after_cr = true;
            }
            '\u{0}'..='\u{1f}' => out.extend_from_slice(&[b'^', c as u8 + 0x40]),
            '\u{7f}' => out.extend_from_slice(b"^?"),
            c if agentguard_audit::is_hidden(c) => {
                out.extend_from_slice(format!("\\u{{{:x}}}", u32::from(c)).as_bytes());
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

impl<W: Write> Write for Neutralized<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut out = Vec::with_capacity(data.len() + 16);
        self.render(data, &mut out);
        self.inner.write_all(&out)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Where a run's output is copied as it arrives: `stream` as it is, or neutralized when
/// `neutralize` is set and `stream` is a terminal.
pub(crate) fn tee<W: Write + IsTerminal + Send + 'static>(
    stream: W,
    neutralize: bool,
) -> Box<dyn Write + Send> {
    if neutralize && stream.is_terminal() {
        Box::new(Neutralized::new(stream))
    } else {
        Box::new(stream)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::Neutralized;

    fn neutral(chunks: &[&[u8]]) -> String {
        let mut out = Neutralized::new(Vec::new());
        for chunk in chunks {
            out.write_all(chunk).unwrap();
        }
        String::from_utf8(out.inner).unwrap()
    }

    #[test]
    fn nothing_that_acts_on_a_terminal_survives() {
        for (input, want) in [
            (&b"plain \xc3\xa9 text\n"[..], "plain é text\n"),
            (b"\x1b]52;c;cHduZWQ=\x07", "^[]52;c;cHduZWQ=^G"),
            (b"\x1b]0;title\x1b\\", "^[]0;title^[\\"),
            (b"\x1b[2J\x1b[H", "^[[2J^[[H"),
            (
                b"\x1b]8;;http://x.example\x1b\\here",
                "^[]8;;http://x.example^[\\here",
            ),
            (
                b"ok\r\x1b[Kagentguard: forged",
                "ok\n^[[Kagentguard: forged",
            ),
            (b"a\r\nb\rc", "a\nb\nc"),
            (b"back\x08space\x7f", "back^Hspace^?"),
            ("c1 \u{9b}2J".as_bytes(), "c1 \\u{9b}2J"),
            ("bidi \u{202e}gnp.exe".as_bytes(), "bidi \\u{202e}gnp.exe"),
            (b"bad \xff\x9b byte", "bad \\x{ff}\\x{9b} byte"),
            (b"tab\tstays", "tab\tstays"),
        ] {
            assert_eq!(neutral(&[input]), want, "{input:?}");
        }
    }

    #[test]
    fn a_sequence_or_character_split_between_writes_is_seen_whole() {
        assert_eq!(neutral(&[b"caf\xc3", b"\xa9"]), "café");
        assert_eq!(neutral(&[b"a\r", b"\nb"]), "a\nb");
        assert_eq!(neutral(&[b"\x1b", b"[2J"]), "^[[2J");
        assert_eq!(
            neutral(&[&"\u{202e}".as_bytes()[..1], &"\u{202e}".as_bytes()[1..]]),
            "\\u{202e}"
        );
    }
}

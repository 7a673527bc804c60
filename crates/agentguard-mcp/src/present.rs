//! What the model and the host's UI are shown of untrusted text (command output, a fetched
//! body, an operator's description): decoded lossily, stripped of terminal escapes and of
//! characters that hide or reorder text, and cut to a head and a tail with the cut stated.

/// Bytes kept from the start of a long stream.
pub const HEAD_BYTES: usize = 2 * 1024;
/// Bytes kept from the end of a long stream (test failures and errors print last).
pub const TAIL_BYTES: usize = 14 * 1024;

/// `text` without ANSI/OSC escape sequences and without every character of the audit crate's
/// one hidden-character table ([`agentguard_audit::is_hidden`]: controls but `\n` and `\t`,
/// format characters, default-ignorable code points such as variation selectors and tag
/// characters, bidi controls).
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            // CSI, OSC and other C1 introducers take their sequence with them.
            '\u{9b}' => skip_until_final(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            '\n' | '\t' => out.push(c),
            c if agentguard_audit::is_hidden(c) => {}
            c => out.push(c),
        }
    }
    out
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// After ESC: a CSI (`[`...final), an OSC/DCS/PM/APC string (ended by BEL or ST), or one
/// character.
fn skip_escape(chars: &mut Chars<'_>) {
    match chars.next() {
        Some('[') => skip_until_final(chars),
        Some(']' | 'P' | '^' | '_' | 'X') => skip_string(chars),
        _ => {}
    }
}

/// A CSI sequence ends at its final byte, `@` to `~`.
fn skip_until_final(chars: &mut Chars<'_>) {
    for c in chars.by_ref() {
        if ('@'..='~').contains(&c) {
            return;
        }
    }
}

/// A string sequence ends at BEL, ST (`ESC \`) or the 8-bit ST.
fn skip_string(chars: &mut Chars<'_>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' if chars.peek() == Some(&'\\') => {
                chars.next();
                return;
            }
            _ => {}
        }
    }
}

/// A stream as shown: sanitized, and when longer than `HEAD_BYTES + TAIL_BYTES`, its head and
/// tail around a marker that says how many bytes were left out. Returns the text and whether
/// anything was left out.
pub fn head_tail(bytes: &[u8]) -> (String, bool) {
    if bytes.len() <= HEAD_BYTES + TAIL_BYTES {
        return (sanitize(&String::from_utf8_lossy(bytes)), false);
    }
    let head = &bytes[..HEAD_BYTES];
    let tail = &bytes[bytes.len() - TAIL_BYTES..];
    let omitted = bytes.len() - HEAD_BYTES - TAIL_BYTES;
    let text = format!(
        "{}\n[... {omitted} bytes omitted ...]\n{}",
        sanitize(&String::from_utf8_lossy(head)),
        sanitize(&String::from_utf8_lossy(tail))
    );
    (text, true)
}

#[cfg(test)]
mod tests {
    use super::{HEAD_BYTES, TAIL_BYTES, head_tail, sanitize};

    #[test]
    fn escapes_controls_and_invisible_characters_are_stripped() {
        for (input, want) in [
            ("\u{1b}[31mred\u{1b}[0m text", "red text"),
            ("title\u{1b}]0;pwned\u{7}after", "titleafter"),
            ("link\u{1b}]8;;https://x.example\u{1b}\\here", "linkhere"),
            ("a\u{9b}2Jb", "ab"),
            ("bell\u{7} nul\u{0} del\u{7f}", "bell nul del"),
            ("cr\rlf\nkeeps\ttab", "crlf\nkeeps\ttab"),
            (
                "rtl \u{202e}txt.exe\u{202c} \u{2066}iso\u{2069}",
                "rtl txt.exe iso",
            ),
            ("zero\u{200b}width\u{feff}", "zerowidth"),
            ("tag\u{e0041}\u{e0042}s", "tags"),
            ("plain ünïcode ✓", "plain ünïcode ✓"),
        ] {
            assert_eq!(sanitize(input), want, "{input:?}");
        }
    }

    /// Over every code point: a hidden one never survives, any other one is kept as it is.
    #[test]
    fn every_code_point_of_the_hidden_table_is_removed_and_no_other() {
        for c in (0..=0x10_ffff_u32).filter_map(char::from_u32) {
            if matches!(
                c,
                '\u{1b}' | '\u{9b}' | '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}'
            ) {
                continue; // introducers: they take their sequence with them (tested above)
            }
            let text = format!("a{c}b");
            let want = if c == '\n' || c == '\t' || !agentguard_audit::is_hidden(c) {
                text.clone()
            } else {
                "ab".to_owned()
            };
            assert_eq!(sanitize(&text), want, "U+{:04X}", u32::from(c));
        }
        // The forms that survived the hand-written list before.
        let smuggled = "x\u{fe0f}\u{e0100}\u{061c}\u{ad}\u{180e}\u{206a}\u{fff9}\u{1d173}y";
        assert_eq!(sanitize(smuggled), "xy");
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_says_what_was_cut() {
        let mut output = vec![b'h'; HEAD_BYTES];
        output.extend(vec![b'm'; 100_000]);
        output.extend(b"FAILED test_x".iter());
        let (text, cut) = head_tail(&output);
        assert!(cut);
        assert!(text.starts_with("hh") && text.ends_with("FAILED test_x"));
        // 2048 + 100000 + 13 bytes, less the 2048 + 14336 kept.
        assert!(
            text.contains("[... 85677 bytes omitted ...]"),
            "{}",
            &text[..3000]
        );
        assert!(text.len() < HEAD_BYTES + TAIL_BYTES + 100);
        let (short, cut) = head_tail(b"ok\n");
        assert_eq!((short.as_str(), cut), ("ok\n", false));
        // A cut inside a UTF-8 sequence is decoded lossily, never a panic.
        let (_, cut) = head_tail("é".repeat(20_000).as_bytes());
        assert!(cut);
    }
}

//! The lexical rules of a workspace path, for a `path` param's value and its `under`: no I/O
//! (the host-side walk is the container crate's).

use crate::rule::Rule;

/// The longest `path` value (bytes), as Linux's `PATH_MAX`.
pub const MAX_PATH_BYTES: usize = 4096;
/// The longest component of a `path` value (bytes), as Linux's `NAME_MAX`.
pub const MAX_COMPONENT_BYTES: usize = 255;

/// A normalized relative path: no leading `/`, no empty, `.` or `..` component, no
/// backslash, percent-encoding or look-alike separator; within the length limits.
pub fn relative_path(text: &str) -> Result<String, (Rule, String)> {
    let fail = |rule: Rule, why: &str| Err((rule, why.to_owned()));
    if text.is_empty() {
        return fail(Rule::EmptyComponent, "the path is empty");
    }
    if text.starts_with('/') {
        return fail(
            Rule::Absolute,
            "the path begins with `/`; give it relative to the workspace",
        );
    }
    if text.len() > MAX_PATH_BYTES {
        return fail(Rule::TooLong, "the path is over 4096 bytes");
    }
    if text.contains('\\') || has_percent_escape(text) {
        return fail(
            Rule::Encoded,
            "the path has a backslash or percent-encoding, which is never decoded; write the characters themselves",
        );
    }
    if let Some(c) = text.chars().find(|c| is_separator_like(*c)) {
        return Err((
            Rule::LookAlike,
            format!(
                "the path has U+{:04X}, which looks like `/`, `.` or `\\`",
                u32::from(c)
            ),
        ));
    }
    for component in text.split('/') {
        match component {
            "" => return fail(Rule::EmptyComponent, "the path has an empty component"),
            "." => return fail(Rule::DotComponent, "the path has a `.` component"),
            ".." => return fail(Rule::Traversal, "the path has a `..` component"),
            c if c.len() > MAX_COMPONENT_BYTES => {
                return fail(Rule::TooLong, "a component of the path is over 255 bytes");
            }
            _ => {}
        }
    }
    Ok(text.to_owned())
}

fn has_percent_escape(text: &str) -> bool {
    text.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit())
}

/// Characters that look like `/`, `.` or `\` (Unicode's confusables for them, and their
/// fullwidth and small forms).
fn is_separator_like(c: char) -> bool {
    matches!(
        c,
        '\u{2215}'
            | '\u{2044}'
            | '\u{2571}'
            | '\u{29F8}'
            | '\u{3033}'
            | '\u{FF0F}'
            | '\u{1735}'
            | '\u{2F03}'
            | '\u{30CE}'
            | '\u{4E3F}'
            | '\u{29F5}'
            | '\u{29F9}'
            | '\u{FE68}'
            | '\u{FF3C}'
            | '\u{2216}'
            | '\u{2024}'
            | '\u{2025}'
            | '\u{2026}'
            | '\u{FF0E}'
            | '\u{FE52}'
            | '\u{0701}'
            | '\u{0702}'
            | '\u{A60E}'
            | '\u{10A50}'
            | '\u{0660}'
            | '\u{06F0}'
            | '\u{A4F8}'
    )
}

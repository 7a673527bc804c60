//! Checking one value an agent gave for a param: the lexical rules, with no I/O.
//!
//! Every type refuses a NUL, a newline, a control or hidden character (the one table of
//! [`crate::is_hidden`]), invalid UTF-8, and, as a whole argv element, a value that begins
//! with `-` or a character that looks like one (option injection). Then each type's own rules:
//! `enum` one of its values, `integer` a plain decimal in range, `path` a normalized relative
//! path inside `under`, `string` its anchored pattern. A refusal names the rule ([`Rule`]).
//! The host-side check of a path (`must_exist`, `kind`) is the container crate's.

use std::fmt;

use icu_properties::CodePointMapData;
use icu_properties::props::GeneralCategory;

use crate::param::{Param, ParamType, PathRule};
use crate::rule::{Refused, Rule, refuse};

/// The longest value looked at (bytes); longer ones are refused unread.
pub const MAX_VALUE_BYTES: usize = 1 << 18;
/// The longest `path` value (bytes), as Linux's `PATH_MAX`.
pub const MAX_PATH_BYTES: usize = 4096;
/// The longest component of a `path` value (bytes), as Linux's `NAME_MAX`.
pub const MAX_COMPONENT_BYTES: usize = 255;

/// A value as a front end received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    /// Text from a command line (`P=VALUE`): an `integer` param parses it.
    Word(String),
    /// A JSON string (or a TOML string default).
    Text(String),
    /// A JSON integer (or a TOML integer default).
    Integer(i128),
    /// JSON `null`: the param is absent (its default applies, if it has one).
    Null,
    /// Another JSON type (a number with a fraction or an exponent, a boolean, an array, an
    /// object), by its name.
    Other(&'static str),
    /// Bytes that are not UTF-8 (shown lossily).
    NotUtf8(String),
}

/// A checked value, as it is placed in the argv and recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An `enum`, `path` or `string` value (a path as the agent gave it, relative).
    Text(String),
    /// An `integer` value.
    Integer(i64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Text(text) => f.write_str(text),
            Value::Integer(n) => write!(f, "{n}"),
        }
    }
}

/// Where the template places a param.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// In at least one argv element on its own (where a leading `-` would be an option).
    Whole,
    /// Only after a literal prefix (`--level={level}`).
    Prefixed,
}

/// Checks `arg` against `param`, placed as `placement`.
pub(crate) fn value(param: &Param, placement: Placement, arg: &Arg) -> Result<Value, Refused> {
    let expects = match param.ty {
        ParamType::Integer { .. } => "an integer",
        _ => "a string",
    };
    let text = match (arg, &param.ty) {
        (Arg::NotUtf8(_), _) => return Err(refuse(Rule::NotUtf8, "the value is not UTF-8")),
        (Arg::Null, _) => return Err(refuse(Rule::Missing, "the value is null")),
        (Arg::Other(kind), _) => {
            return Err(refuse(
                Rule::WrongType,
                format!("the value is {kind}; this param takes {expects}"),
            ));
        }
        (Arg::Integer(n), ParamType::Integer { min, max }) => {
            return in_range(*n, *min, *max);
        }
        (Arg::Integer(_), _) => {
            return Err(refuse(
                Rule::WrongType,
                "the value is a number; this param takes a string",
            ));
        }
        (Arg::Text(_), ParamType::Integer { .. }) => {
            return Err(refuse(
                Rule::WrongType,
                "the value is a string; this param takes an integer (a JSON number such as 3, never \"3\")",
            ));
        }
        (Arg::Word(text) | Arg::Text(text), _) => text,
    };
    text_rules(text, placement)?;
    match &param.ty {
        ParamType::Enum(values) => {
            if values.iter().any(|v| v == text) {
                Ok(Value::Text(text.clone()))
            } else {
                Err(refuse(
                    Rule::NotInEnum,
                    format!("the value is not one of {}", values.join(", ")),
                ))
            }
        }
        ParamType::Integer { min, max } => {
            let signed = *min < 0 && placement == Placement::Prefixed;
            in_range(decimal(text, signed)?, *min, *max)
        }
        ParamType::Path(rule) => path(text, rule).map(Value::Text),
        ParamType::String(rule) => {
            let length = text.chars().count();
            if length > rule.max_length {
                return Err(refuse(
                    Rule::TooLong,
                    format!(
                        "the value is {length} characters; at most {} are allowed",
                        rule.max_length
                    ),
                ));
            }
            if rule.regex.is_match(text) {
                Ok(Value::Text(text.clone()))
            } else {
                Err(refuse(
                    Rule::NoMatch,
                    format!("the whole value must match the pattern {:?}", rule.pattern),
                ))
            }
        }
    }
}

/// The rules of every type, on the text.
fn text_rules(text: &str, placement: Placement) -> Result<(), Refused> {
    if text.len() > MAX_VALUE_BYTES {
        return Err(refuse(
            Rule::TooLong,
            format!(
                "the value is {} bytes; no value may be over {MAX_VALUE_BYTES}",
                text.len()
            ),
        ));
    }
    for c in text.chars() {
        let (rule, what) = match c {
            '\0' => (Rule::Nul, "a NUL character"),
            '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => (Rule::Newline, "a line break"),
            c if c.is_control() => (Rule::Control, "a control character"),
            c if crate::is_hidden(c) => (Rule::Hidden, "a character that hides or reorders text"),
            _ => continue,
        };
        return Err(refuse(
            rule,
            format!("the value has {what} (U+{:04X})", u32::from(c)),
        ));
    }
    if placement == Placement::Whole {
        match text.chars().next() {
            Some('-') => {
                return Err(refuse(
                    Rule::Option,
                    "the value begins with `-` and would be read as an option",
                ));
            }
            Some(c) if is_dash_like(c) => {
                return Err(refuse(
                    Rule::LookAlike,
                    format!(
                        "the value begins with U+{:04X}, which looks like `-`",
                        u32::from(c)
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A dash of Unicode's Dash_Punctuation category, or a minus sign.
fn is_dash_like(c: char) -> bool {
    matches!(c, '\u{2212}' | '\u{2796}' | '\u{FE63}' | '\u{FF0D}')
        || CodePointMapData::<GeneralCategory>::new().get(c) == GeneralCategory::DashPunctuation
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

fn decimal(text: &str, signed: bool) -> Result<i128, Refused> {
    let digits = match text.strip_prefix('-') {
        Some(rest) if signed => rest,
        _ => text,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let sign = if signed { "an optional `-`, then " } else { "" };
        return Err(refuse(
            Rule::NotDecimal,
            format!(
                "an integer is {sign}decimal digits only: no `+`, space, fraction, exponent or hex"
            ),
        ));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(refuse(Rule::LeadingZero, "an integer has no leading zero"));
    }
    if digits.len() > 20 {
        return Err(refuse(Rule::OutOfRange, "the integer is out of range"));
    }
    let n: i128 = digits
        .parse()
        .map_err(|_| refuse(Rule::OutOfRange, "the integer is out of range"))?;
    Ok(if digits.len() < text.len() { -n } else { n })
}

fn in_range(n: i128, min: i64, max: i64) -> Result<Value, Refused> {
    if n < i128::from(min) || n > i128::from(max) {
        return Err(refuse(
            Rule::OutOfRange,
            format!("{n} is outside [{min}, {max}]"),
        ));
    }
    Ok(Value::Integer(n as i64))
}

/// A normalized relative path: no leading `/`, no empty, `.` or `..` component, no
/// backslash, percent-encoding or look-alike separator; within the length limits.
pub(crate) fn relative_path(text: &str) -> Result<String, (Rule, String)> {
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

fn path(text: &str, rule: &PathRule) -> Result<String, Refused> {
    let path = relative_path(text).map_err(|(rule, why)| refuse(rule, why))?;
    if let Some(under) = &rule.under {
        let inside = path == *under
            || path
                .strip_prefix(under.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        if !inside {
            return Err(refuse(
                Rule::Outside,
                format!("the path is not inside {under}/"),
            ));
        }
    }
    Ok(path)
}

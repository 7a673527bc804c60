//! Checking one value an agent gave for a param: the lexical rules, with no I/O.
//!
//! Every type refuses a NUL, a newline, a control or hidden character (the one table of
//! [`crate::is_hidden`]), invalid UTF-8, and, as a whole argv element, a value that begins
//! with `-` or a character that looks like one (option injection). Then each type's own rules:
//! `enum` one of its values, `integer` a plain decimal in range, `path` a normalized relative
//! path inside `under`, `string` its anchored pattern. A refusal names the rule ([`Rule`]).
//! The host-side check of a path (`must_exist`, `kind`) is the container crate's.

use icu_properties::CodePointMapData;
use icu_properties::props::GeneralCategory;

use crate::param::{Param, ParamSpec, ParamType, PathRule};
use crate::path::relative_path;
use crate::rule::{Refused, Rule, refuse};
use crate::value::{Arg, Placement, Value};

/// The longest value looked at (bytes); longer ones are refused unread.
pub const MAX_VALUE_BYTES: usize = 1 << 18;

/// A declared param with its enum values and its default checked by the rules any value
/// meets (a default that its own rules refuse is a config error naming the key).
pub(crate) fn declared(
    name: &str,
    spec: &ParamSpec,
    placement: Placement,
) -> Result<Param, String> {
    let key = |k: &str| format!("params.{name}.{k}");
    let mut param = Param::from_spec(name, spec, placement)?;
    if let ParamType::Enum(values) = &param.ty {
        for value in values {
            self::value(&param, placement, &Arg::Text(value.clone()))
                .map_err(|e| format!("{}: {value:?}: {}", key("values"), e.why))?;
        }
    }
    if let Some(default) = &spec.default {
        let value = self::value(&param, placement, default)
            .map_err(|e| format!("{}: {}", key("default"), e.why))?;
        param.default = Some(value);
    }
    Ok(param)
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
    if let Some(glob) = &rule.glob
        && !glob.matches(&path)
    {
        return Err(refuse(
            Rule::NotMatched,
            format!("the path does not match {:?}", glob.as_str()),
        ));
    }
    Ok(path)
}

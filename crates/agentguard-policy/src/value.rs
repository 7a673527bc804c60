//! The values a param check takes and gives: an [`Arg`] as a front end received it, a
//! checked [`Value`], and where the template places it ([`Placement`]).

use std::fmt;

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

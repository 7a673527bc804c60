//! The key table: every key AgentGuard's crates write in an event's `subject` or `data`, with
//! its one JSON type across all kinds (docs/audit.md has the same table).

use serde_json::Value;

/// The JSON type of a `subject` or `data` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// A string.
    String,
    /// A number (an integer).
    Number,
    /// `true` or `false`.
    Bool,
    /// A number, or `null` when there is none (an exit code of a run that never exited).
    NumberOrNull,
    /// An array of strings.
    Strings,
    /// An object whose values are strings or integers (a command's param values, the
    /// invoker).
    Params,
}

impl ValueType {
    pub(crate) fn matches(self, value: &Value) -> bool {
        match self {
            ValueType::String => value.is_string(),
            ValueType::Number => value.is_u64() || value.is_i64(),
            ValueType::Bool => value.is_boolean(),
            ValueType::NumberOrNull => value.is_null() || value.is_u64() || value.is_i64(),
            ValueType::Strings => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            ValueType::Params => value.as_object().is_some_and(|map| {
                map.values()
                    .all(|v| v.is_string() || v.is_i64() || v.is_u64())
            }),
        }
    }
}

/// Every key AgentGuard's crates write in `subject` or `data`, with its one type across all
/// event kinds (docs/audit.md has the same table). [`MemorySink`](crate::MemorySink) refuses
/// an event whose known key has another type, so every test that records through it checks
/// this table; tidy checks that every key written in the source is listed here.
pub const KEYS: &[(&str, ValueType)] = &[
    // subject
    ("command", ValueType::String),
    ("image", ValueType::String),
    ("url", ValueType::String),
    ("target", ValueType::String),
    ("client", ValueType::String),
    ("path", ValueType::String),
    ("run", ValueType::String),
    ("tool", ValueType::String),
    ("mcp_client", ValueType::String),
    ("route", ValueType::String),
    // data
    ("status", ValueType::Number),
    ("run_status", ValueType::String),
    ("exit_code", ValueType::NumberOrNull),
    ("duration_ms", ValueType::Number),
    ("truncated", ValueType::Bool),
    ("container", ValueType::String),
    ("signal", ValueType::String),
    ("message", ValueType::String),
    ("rule", ValueType::String),
    ("addresses", ValueType::Strings),
    ("dialed", ValueType::String),
    ("sni", ValueType::String),
    ("bytes", ValueType::Number),
    ("bytes_up", ValueType::Number),
    ("bytes_down", ValueType::Number),
    ("line", ValueType::Number),
    ("removed_bytes", ValueType::Number),
    ("added_bytes", ValueType::Number),
    ("removed_sha256", ValueType::String),
    ("request_id", ValueType::String),
    ("engine", ValueType::String),
    ("namespace", ValueType::String),
    ("weakened", ValueType::Strings),
    ("repeated", ValueType::Number),
    ("summarized", ValueType::Bool),
    ("params", ValueType::Params),
    ("method", ValueType::String),
    ("pod", ValueType::String),
    ("events", ValueType::Number),
    ("refused", ValueType::Number),
    ("missing", ValueType::Number),
    ("image_id", ValueType::String),
    ("argv", ValueType::Strings),
    ("config_sha256", ValueType::String),
    ("invoker", ValueType::Params),
    ("agentguard_version", ValueType::String),
    ("checks", ValueType::Params),
    ("failed", ValueType::Strings),
    ("micros", ValueType::Number),
    ("generation", ValueType::Number),
    ("connect_micros", ValueType::Number),
    ("sha256", ValueType::String),
    ("added", ValueType::Strings),
    ("removed", ValueType::Strings),
];

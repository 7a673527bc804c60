//! The event a caller records, and the sealed record a reader gets back.
//!
//! Callers build an [`Event`] (kind, decision, stable reason code, subject, kind-specific
//! data); the log seals it into a [`Record`] by adding the schema version, sequence number,
//! UTC timestamp and chain fields. Argv and other strings are stored as JSON strings; they are
//! UTF-8 by construction (configuration is TOML), and any non-UTF-8 value a caller passes is
//! converted lossily (U+FFFD) before it reaches this crate. Environment values are never
//! recorded: they may be secrets.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::keys::{KEYS, ValueType};

/// The schema version written in every record's `v` field.
pub const SCHEMA_VERSION: u64 = 1;

/// What kind of decision an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Kind {
    /// A container run of an allowlisted command.
    ContainerRun,
    /// A DNS-pinned fetch.
    Fetch,
    /// An egress proxy CONNECT decision.
    EgressConnect,
    /// An egress proxy tunnel closing, with bytes each way and duration.
    EgressClose,
    /// A request through a credential route of an egress proxy.
    EgressRoute,
    /// How a cluster egress proxy's audit stream came back: whole, cut, or lines refused.
    EgressStream,
    /// The log itself was repaired (a torn tail truncated).
    LogRepaired,
    /// A tool call through `agentguard mcp`.
    McpCall,
    /// What a run's container looked like from inside before its command started.
    IsolationReceipt,
    /// An egress proxy's policy file loaded (a new generation of rules) or refused.
    PolicyLoaded,
}

impl Kind {
    /// Every kind a log can hold, in the order docs/audit.md lists them (`audit show --kind`
    /// offers exactly these).
    pub const ALL: [Kind; 10] = [
        Kind::ContainerRun,
        Kind::Fetch,
        Kind::EgressConnect,
        Kind::EgressClose,
        Kind::EgressRoute,
        Kind::EgressStream,
        Kind::LogRepaired,
        Kind::McpCall,
        Kind::IsolationReceipt,
        Kind::PolicyLoaded,
    ];

    /// The kind whose wire name is `name`.
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The wire name (`container_run`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::ContainerRun => "container_run",
            Kind::Fetch => "fetch",
            Kind::EgressConnect => "egress_connect",
            Kind::EgressClose => "egress_close",
            Kind::EgressRoute => "egress_route",
            Kind::EgressStream => "egress_stream",
            Kind::LogRepaired => "log_repaired",
            Kind::McpCall => "mcp_call",
            Kind::IsolationReceipt => "isolation_receipt",
            Kind::PolicyLoaded => "policy_loaded",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The decision: allowed, denied by policy, or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The action was allowed (and, for a run, carried out).
    Allow,
    /// Policy refused the action.
    Deny,
    /// The action was allowed but failed (engine error, DNS failure, ...).
    Error,
}

impl Decision {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::Error => "error",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first known key of `event` whose value has another type than [`KEYS`] says.
pub fn mistyped_key(event: &Event) -> Option<(&str, ValueType)> {
    event
        .subject
        .iter()
        .chain(event.data.iter())
        .find_map(|(key, value)| {
            KEYS.iter()
                .find(|(known, _)| known == key)
                .filter(|(_, want)| !want.matches(value))
                .map(|(known, want)| (*known, *want))
        })
}

/// One decision to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The kind of decision.
    pub kind: Kind,
    /// Allow, deny or error.
    pub decision: Decision,
    /// A stable snake_case reason code (`ok`, `domain_not_allowed`, `timeout`, ...).
    pub reason: String,
    /// What the decision was about (command and image, URL, target and client).
    pub subject: Map<String, Value>,
    /// Kind-specific fields (exit status, duration, bytes each way, address dialed).
    pub data: Map<String, Value>,
}

impl Event {
    /// An event with an empty subject and data.
    pub fn new(kind: Kind, decision: Decision, reason: impl Into<String>) -> Event {
        Event {
            kind,
            decision,
            reason: reason.into(),
            subject: Map::new(),
            data: Map::new(),
        }
    }

    /// A container run of `command` in `image`.
    pub fn container_run(
        decision: Decision,
        reason: impl Into<String>,
        command: &str,
        image: &str,
    ) -> Event {
        Event::new(Kind::ContainerRun, decision, reason)
            .subject("command", command)
            .subject("image", image)
    }

    /// A fetch of `url` (kept [`capped`]: it may come from an agent).
    pub fn fetch(decision: Decision, reason: impl Into<String>, url: &str) -> Event {
        Event::new(Kind::Fetch, decision, reason).subject("url", capped(url).into_owned())
    }

    /// An egress CONNECT to `target` (`host:port`) from `client` (`ip:port`).
    pub fn egress_connect(
        decision: Decision,
        reason: impl Into<String>,
        target: &str,
        client: &str,
    ) -> Event {
        Event::new(Kind::EgressConnect, decision, reason)
            .subject("target", target)
            .subject("client", client)
    }

    /// An egress tunnel to `target` from `client` closing.
    pub fn egress_close(reason: impl Into<String>, target: &str, client: &str) -> Event {
        Event::new(Kind::EgressClose, Decision::Allow, reason)
            .subject("target", target)
            .subject("client", client)
    }

    /// A request from `client` through the credential route `route`, for `path` (the path
    /// after the route's name, without its query; the client's text, kept [`capped`]).
    pub fn egress_route(
        decision: Decision,
        reason: impl Into<String>,
        route: &str,
        path: &str,
        client: &str,
    ) -> Event {
        Event::new(Kind::EgressRoute, decision, reason)
            .subject("route", capped(route).into_owned())
            .subject("path", capped(path).into_owned())
            .subject("client", client)
    }

    /// A `policy_loaded` event for the policy file at `path`.
    pub fn policy_loaded(decision: Decision, reason: impl Into<String>, path: &str) -> Event {
        Event::new(Kind::PolicyLoaded, decision, reason).subject("path", capped(path).into_owned())
    }

    /// A call of the MCP tool `tool` by the client `client` (`name/version`); both are the
    /// client's text, kept [`capped`].
    pub fn mcp_call(
        decision: Decision,
        reason: impl Into<String>,
        tool: &str,
        client: &str,
    ) -> Event {
        Event::new(Kind::McpCall, decision, reason)
            .subject("tool", capped(tool).into_owned())
            .subject("mcp_client", capped(client).into_owned())
    }

    /// Sets one subject field.
    pub fn subject(mut self, key: &str, value: impl Into<Value>) -> Event {
        self.subject.insert(key.to_owned(), value.into());
        self
    }

    /// Sets one data field.
    pub fn data(mut self, key: &str, value: impl Into<Value>) -> Event {
        self.data.insert(key.to_owned(), value.into());
        self
    }

    /// Adds `params`, a command's checked values (strings and integers), when it has any.
    pub fn params(self, params: &[(String, agentguard_policy::Value)]) -> Event {
        if params.is_empty() {
            return self;
        }
        self.data("params", params_with(params, recorded_text))
    }
}

/// A command's checked param values as one JSON object (strings and integers), as `run
/// --json` and MCP results write them (the audit log cuts long ones: [`recorded_text`]).
pub fn params_json(params: &[(String, agentguard_policy::Value)]) -> Value {
    params_with(params, str::to_owned)
}

fn params_with(
    params: &[(String, agentguard_policy::Value)],
    text: impl Fn(&str) -> String,
) -> Value {
    let map: serde_json::Map<String, Value> = params
        .iter()
        .map(|(name, value)| {
            let value = match value {
                agentguard_policy::Value::Text(t) => Value::from(text(t)),
                agentguard_policy::Value::Integer(n) => Value::from(*n),
            };
            (name.clone(), value)
        })
        .collect();
    Value::Object(map)
}

/// The longest param value recorded whole; a longer one is cut (see [`recorded_text`]).
pub const MAX_RECORDED_VALUE: usize = 1024;

/// A value as the audit log records it: whole up to [`MAX_RECORDED_VALUE`] bytes; longer, its
/// first 256 characters, then `…[cut: N bytes, sha256 HEX]`, so that a run's event always fits
/// in one line (a run never starts unless its event can be written) and still identifies the
/// exact value.
pub fn recorded_text(text: &str) -> String {
    if text.len() <= MAX_RECORDED_VALUE {
        return text.to_owned();
    }
    let head: String = text.chars().take(256).collect();
    format!(
        "{head}…[cut: {} bytes, sha256 {}]",
        text.len(),
        crate::digest::sha256_hex(text.as_bytes())
    )
}

/// Text that came from a client or a peer, shown to people (a table, a log line, an error
/// message): every control character, C0, DEL and C1 (so `\n`, `\r` and ESC too), and every
/// bidirectional or invisible formatting character, is escaped as `\u{..}`, so untrusted
/// text cannot move the cursor, recolour a terminal, or fake a line.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if agentguard_policy::is_hidden(c) {
                write!(f, "\\u{{{:x}}}", u32::from(c))?;
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        Ok(())
    }
}

/// The longest client-supplied string an event keeps whole (characters).
pub const MAX_CLIENT_TEXT: usize = 256;

/// A string a client or peer chose (an MCP client's name, a request id, a URL), as an event
/// keeps it: whole when it has at most [`MAX_CLIENT_TEXT`] characters, otherwise its first
/// [`MAX_CLIENT_TEXT`] characters, then `...[N bytes, sha256 HEX]` naming the whole value, so
/// no client can make an event too long for a line and the value can still be matched.
pub fn capped(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(MAX_CLIENT_TEXT) {
        None => std::borrow::Cow::Borrowed(text),
        Some((cut, _)) => std::borrow::Cow::Owned(format!(
            "{}...[{} bytes, sha256 {}]",
            &text[..cut],
            text.len(),
            crate::digest::sha256_hex(text.as_bytes())
        )),
    }
}

/// One line for an error and every cause under it, `outer: cause: root cause`, as recorded in
/// an event's `message` and printed by the CLI. Each message states only its own part, so no
/// cause is printed twice.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !part.is_empty() && !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

/// A sealed event as stored on one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Schema version.
    pub v: u64,
    /// Sequence number: consecutive, never repeated, across the whole log.
    pub seq: u64,
    /// UTC time, RFC 3339 with milliseconds.
    pub ts: String,
    /// The kind of decision.
    pub kind: Kind,
    /// Allow, deny or error.
    pub decision: Decision,
    /// Stable reason code.
    pub reason: String,
    /// What the decision was about.
    pub subject: Map<String, Value>,
    /// Kind-specific fields.
    pub data: Map<String, Value>,
    /// The previous record's `hash` (64 zeros for the first).
    pub prev: String,
    /// SHA-256 (hex) of the canonical form of every other field except `hmac`.
    pub hash: String,
    /// HMAC-SHA256 (hex) of the same canonical bytes, when the log is signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac: Option<String>,
}

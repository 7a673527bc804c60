//! One line from the client, read as the gate reads it before rmcp does (pure, unit-tested):
//! whether it is a message at all, and for a `tools/call`, its shape, strictly, so that every
//! call that reaches the server is either handed to rmcp in a form rmcp accepts or refused by
//! the gate with its own answer and event.
//!
//! The envelope is read with the request's `params` kept raw, so a value that a full parse
//! refuses (`1e400`, a lone surrogate `"\ud800"`) or silently folds (a duplicated key, where
//! the last would win) is still seen where it is, and named.

use std::collections::BTreeSet;
use std::fmt;

use agentguard_policy::Arg;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// The longest line the gate reads; a longer one is answered and skipped.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The `_meta` key a modern (stateless) request carries its protocol version in.
const PROTOCOL_META: &str = "io.modelcontextprotocol/protocolVersion";

/// A JSON object's members in the order sent, duplicates kept, values raw.
#[derive(Debug, Default)]
pub(crate) struct Members<'a>(pub(crate) Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ordered<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Ordered<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Members<'a>, M::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    out.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(out))
            }
        }
        deserializer.deserialize_map(Ordered(std::marker::PhantomData))
    }
}

impl<'a> Members<'a> {
    /// The one value of `key`: `Err` when it is given more than once.
    fn one(&self, key: &str) -> Result<Option<&'a RawValue>, String> {
        let mut found = self.0.iter().filter(|(k, _)| k == key);
        let first = found.next().map(|(_, v)| *v);
        if found.next().is_some() {
            return Err(format!("`{key}` is given more than once"));
        }
        Ok(first)
    }

    fn keys(&self) -> BTreeSet<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// What a line is.
#[derive(Debug)]
pub(crate) enum Line<'a> {
    /// Not a JSON-RPC message the gate can answer with an id: `(code, message)`.
    Unreadable(i64, String),
    /// A request or notification: its raw id (none for a notification), method and params.
    Message {
        id: Option<&'a RawValue>,
        method: String,
        params: Option<&'a RawValue>,
        /// The whole line parses as JSON, every value included.
        strict: bool,
    },
}

/// Reads one line (without its newline).
pub(crate) fn read(line: &[u8]) -> Line<'_> {
    if line.len() > MAX_LINE_BYTES {
        let why = format!("the message is over {MAX_LINE_BYTES} bytes");
        return Line::Unreadable(-32600, why);
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return Line::Unreadable(-32700, "Parse error: the line is not UTF-8".into());
    };
    if text.trim_start().starts_with('[') {
        let why = "a batch (a JSON array) is not accepted; send one message per line";
        return Line::Unreadable(-32600, why.into());
    }
    let members: Members<'_> = match serde_json::from_str(text) {
        Ok(members) => members,
        Err(e) => return Line::Unreadable(-32700, format!("Parse error: {e}")),
    };
    let field = |key: &str| members.one(key).map_err(|why| (-32600, why));
    let fields = (field("id"), field("method"), field("params"));
    let (id, method, params) = match fields {
        (Ok(id), Ok(method), Ok(params)) => (id, method, params),
        (Err((code, why)), ..) | (_, Err((code, why)), _) | (.., Err((code, why))) => {
            return Line::Unreadable(code, format!("Invalid request: {why}"));
        }
    };
    let method = match method.map(|m| serde_json::from_str::<String>(m.get())) {
        Some(Ok(method)) => method,
        // A response from the client, or no method: rmcp's to read.
        None => String::new(),
        Some(Err(_)) => {
            return Line::Unreadable(-32600, "Invalid request: `method` is not a string".into());
        }
    };
    let strict = serde_json::from_str::<Value>(text).is_ok() && no_duplicates(text);
    Line::Message {
        id,
        method,
        params,
        strict,
    }
}

/// True when no object anywhere in `text` repeats a key.
fn no_duplicates(text: &str) -> bool {
    fn check(raw: &RawValue) -> bool {
        let text = raw.get();
        match text.as_bytes().first() {
            Some(b'{') => serde_json::from_str::<Members<'_>>(text)
                .is_ok_and(|m| m.keys().len() == m.0.len() && m.0.iter().all(|(_, v)| check(v))),
            Some(b'[') => serde_json::from_str::<Vec<&RawValue>>(text)
                .is_ok_and(|items| items.iter().all(|v| check(v))),
            _ => true,
        }
    }
    serde_json::from_str::<&RawValue>(text).is_ok_and(check)
}

/// A `tools/call` as the gate decides it.
#[derive(Debug, PartialEq)]
pub(crate) enum Call {
    /// Well formed: rmcp and the server take it from here.
    Forward,
    /// A shape rmcp would refuse without reaching the server (`invalid_request`), or a call
    /// before the session is initialized (`not_initialized`): `(reason, tool, message)`.
    Refused(&'static str, String, String),
    /// Well formed, but with argument values only the raw reading sees (a repeated key, a
    /// number out of range, a lone surrogate): the tool, and every argument as given.
    Arguments(String, Vec<(String, Arg)>),
}

/// Decides a `tools/call`'s params; `initialized` says whether the session began.
pub(crate) fn call(params: Option<&RawValue>, initialized: bool) -> Call {
    let invalid = |tool: &str, why: String| Call::Refused("invalid_request", tool.into(), why);
    let Some(params) = params else {
        return invalid(
            "",
            "a tools/call needs `params` with the tool's `name`".into(),
        );
    };
    let Ok(members) = serde_json::from_str::<Members<'_>>(params.get()) else {
        return invalid("", "`params` is not an object".into());
    };
    let name = match members.one("name") {
        Err(why) => return invalid("", why),
        Ok(None) => return invalid("", "`params.name` is missing".into()),
        Ok(Some(raw)) => match serde_json::from_str::<String>(raw.get()) {
            Ok(name) => name,
            Err(_) => return invalid("", "`params.name` is not a string".into()),
        },
    };
    let modern = members
        .one("_meta")
        .ok()
        .flatten()
        .and_then(|m| serde_json::from_str::<Members<'_>>(m.get()).ok())
        .is_some_and(|meta| meta.0.iter().any(|(k, _)| k == PROTOCOL_META));
    if !initialized && !modern {
        let why = "the session is not initialized: send `initialize` first (or, in the stateless protocol, its `_meta` on every request)";
        return Call::Refused("not_initialized", name, why.into());
    }
    let arguments = match members.one("arguments") {
        Err(why) => return invalid(&name, why),
        Ok(arguments) => arguments,
    };
    let Some(arguments) = arguments.filter(|a| a.get() != "null") else {
        return Call::Forward;
    };
    let Ok(given) = serde_json::from_str::<Members<'_>>(arguments.get()) else {
        let why = "`params.arguments` must be an object of the tool's params";
        return invalid(&name, why.into());
    };
    let mut raw_only = given.keys().len() != given.0.len();
    let args = given
        .0
        .iter()
        .map(|(key, raw)| {
            let (arg, parsed) = argument(raw);
            raw_only |= !parsed;
            (key.clone(), arg)
        })
        .collect();
    if raw_only {
        Call::Arguments(name, args)
    } else {
        Call::Forward
    }
}

/// One argument value as policy's `Arg`, and whether a full JSON parse read it too.
fn argument(raw: &RawValue) -> (Arg, bool) {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(value) => (crate::schema::arg(&value), true),
        // A string with an escape that is no character (a lone surrogate).
        Err(_) if raw.get().starts_with('"') => (Arg::NotUtf8(raw.get().to_owned()), false),
        Err(_) => (Arg::Other("number out of range"), false),
    }
}

#[cfg(test)]
mod tests;

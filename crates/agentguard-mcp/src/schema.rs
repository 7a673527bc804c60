//! A command's params as JSON: the input schema its tool lists (generated from the params, so
//! it cannot drift from what is enforced), OpenAI's strict form of it, and a call's JSON
//! arguments as the policy crate's [`Arg`]s. The schema only guides the model: every call is
//! decided by the policy crate's validator, which also requires the schema's JSON type (an
//! `integer` param takes a JSON integer, never the string "3").

use agentguard_policy::{Arg, Command, Param, ParamType, Value as Checked};
use rmcp::model::JsonObject;
use serde_json::{Value, json};

use crate::present::sanitize;

/// The most matches of a `glob` listed as the property's `enum`; past it, `examples`.
pub const MAX_ENUM_MATCHES: usize = 256;
/// How many matches `examples` shows.
pub const EXAMPLE_MATCHES: usize = 20;

/// The input schema of a command's tool: one property per param, `required` the params
/// without a default, nothing else allowed. A command without params takes nothing.
pub fn input_schema(command: &Command) -> JsonObject {
    input_schema_with(command, &std::collections::BTreeMap::new())
}

/// [`input_schema`], a `path` param with a `glob` listing `matches` (the workspace paths it
/// matches now, sorted): all of them as `enum` up to [`MAX_ENUM_MATCHES`], else the first
/// [`EXAMPLE_MATCHES`] as `examples`, the description saying which.
pub fn input_schema_with(
    command: &Command,
    matches: &std::collections::BTreeMap<String, Vec<String>>,
) -> JsonObject {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for (name, param) in command.params() {
        let mut p = property(param);
        if let (ParamType::Path(rule), Some(found)) = (&param.ty, matches.get(name))
            && let Some(glob) = &rule.glob
        {
            list_matches(&mut p, glob.as_str(), found);
        }
        properties.insert(name.clone(), p);
        if param.default.is_none() {
            required.push(Value::from(name.as_str()));
        }
    }
    let mut schema =
        json!({"type": "object", "properties": properties, "additionalProperties": false});
    if !required.is_empty() {
        schema["required"] = Value::from(required);
    }
    match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// A path property's matches: `enum` or `examples`, and what the description says of them.
fn list_matches(p: &mut Value, glob: &str, found: &[String]) {
    // A name with a character the validator refuses is never offered.
    let shown: Vec<String> = found
        .iter()
        .filter(|f| sanitize(f) == **f)
        .cloned()
        .collect();
    let said = if shown.len() <= MAX_ENUM_MATCHES {
        p["enum"] = Value::from(shown.clone());
        format!(
            "The value must match {glob:?}; the {} matching paths now are listed.",
            shown.len()
        )
    } else {
        p["examples"] = Value::from(shown[..EXAMPLE_MATCHES].to_vec());
        format!(
            "The value must match {glob:?}; {} paths match now, the first {EXAMPLE_MATCHES} are examples.",
            shown.len()
        )
    };
    let text = p["description"].as_str().map(str::to_owned);
    p["description"] = Value::from(match text {
        Some(t) => format!("{t} {said}"),
        None => said,
    });
}

/// One param's property: its JSON type and the rules a schema can state.
fn property(param: &Param) -> Value {
    let mut p = match &param.ty {
        ParamType::Enum(values) => json!({"type": "string", "enum": values}),
        ParamType::Integer { min, max } => {
            json!({"type": "integer", "minimum": min, "maximum": max})
        }
        ParamType::Path(_) => {
            json!({"type": "string", "maxLength": agentguard_policy::MAX_PATH_BYTES})
        }
        ParamType::String(rule) => json!({
            "type": "string",
            "pattern": format!("^(?:{})$", rule.pattern),
            "maxLength": rule.max_length,
        }),
    };
    let mut text = param
        .description
        .as_deref()
        .map(|d| sanitize(d).trim().to_owned())
        .unwrap_or_default();
    if let ParamType::Path(rule) = &param.ty {
        let inside = rule
            .under
            .as_deref()
            .map_or_else(|| "the workspace".to_owned(), |u| format!("{u}/"));
        let facts =
            format!("A path relative to the workspace, inside {inside}: no `..`, no leading `/`.");
        text = if text.is_empty() {
            facts
        } else {
            format!("{text} {facts}")
        };
    }
    if let Some(default) = &param.default {
        let facts = format!("Default: {default}.");
        text = if text.is_empty() {
            facts
        } else {
            format!("{text} {facts}")
        };
    }
    if !text.is_empty() {
        p["description"] = Value::from(text);
    }
    if let Some(default) = &param.default {
        p["default"] = match default {
            Checked::Text(t) => Value::from(t.as_str()),
            Checked::Integer(n) => Value::from(*n),
        };
    }
    p
}

/// OpenAI's strict form of an input schema: every property required, an optional one taking
/// `null` as well (which means "the default"), and only keywords strict mode accepts.
pub fn openai_strict(schema: &JsonObject) -> Value {
    let mut out = Value::Object(schema.clone());
    let mut names = Vec::new();
    if let Some(properties) = out["properties"].as_object_mut() {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, property) in properties.iter_mut() {
            names.push(Value::from(name.as_str()));
            if let Some(map) = property.as_object_mut() {
                map.remove("maxLength");
                map.remove("default");
                if !required.contains(&name.as_str()) {
                    let ty = map.get("type").cloned().unwrap_or(Value::Null);
                    map.insert("type".into(), json!([ty, "null"]));
                    if let Some(Value::Array(values)) = map.get_mut("enum") {
                        values.push(Value::Null);
                    }
                }
            }
        }
    }
    out["required"] = Value::from(names);
    out
}

/// A call's JSON arguments as the policy crate takes them, in the order given.
pub fn arguments(arguments: Option<&JsonObject>) -> Vec<(String, Arg)> {
    arguments
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.clone(), arg(value)))
        .collect()
}

pub(crate) fn arg(value: &Value) -> Arg {
    match value {
        Value::String(s) => Arg::Text(s.clone()),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Arg::Integer(i128::from(i)),
            (None, Some(u)) => Arg::Integer(i128::from(u)),
            // serde_json keeps `-0` as a float to keep its sign: no fraction, but no integer.
            (None, None) if n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()) => {
                Arg::Other("negative zero (-0)")
            }
            // A fraction or an exponent (`3.0`, `1e1`), or past 2^64.
            (None, None) => Arg::Other("number with a fraction or an exponent"),
        },
        Value::Null => Arg::Null,
        Value::Bool(_) => Arg::Other("boolean"),
        Value::Array(_) => Arg::Other("array"),
        Value::Object(_) => Arg::Other("object"),
    }
}

//! The key paths of the config file, from the loader's own JSON Schema
//! (`agentguard_config::schema`): `image`, `commands.NAME.argv`, `egress.allow`, ... A map's
//! entries (commands, params, secrets, routes) are `NAME`; a table's own key is listed too.
//! docs/config.md's key table must list exactly these.

use std::collections::BTreeSet;

use serde_json::Value;

pub(super) fn keys(schema: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(schema, &schema["$defs"], "", &mut out);
    out
}

fn walk(node: &Value, defs: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(reference) = node["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or_default();
        walk(&defs[name], defs, prefix, out);
        return;
    }
    for alternatives in ["anyOf", "oneOf"] {
        for alternative in node[alternatives].as_array().into_iter().flatten() {
            walk(alternative, defs, prefix, out);
        }
    }
    for (key, value) in node["properties"].as_object().into_iter().flatten() {
        let path = format!("{prefix}{key}");
        out.insert(path.clone());
        walk(value, defs, &format!("{path}."), out);
    }
    if node["additionalProperties"].is_object() {
        walk(
            &node["additionalProperties"],
            defs,
            &format!("{prefix}NAME."),
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nested_tables_maps_and_options_are_walked() {
        let schema = serde_json::json!({
            "properties": {
                "image": {"type": "string"},
                "egress": {"anyOf": [{"$ref": "#/$defs/E"}, {"type": "null"}]},
                "commands": {"additionalProperties": {"$ref": "#/$defs/C"}}
            },
            "$defs": {
                "E": {"properties": {"allow": {"type": "array"}}},
                "C": {"oneOf": [{"type": "array"}, {"properties": {"argv": {}}}]}
            }
        });
        let keys: Vec<String> = super::keys(&schema).into_iter().collect();
        assert_eq!(
            keys,
            [
                "commands",
                "commands.NAME.argv",
                "egress",
                "egress.allow",
                "image"
            ]
        );
    }
}

//! YAML documents from JSON values, in block style, for `agentguard k8s manifests`.
//!
//! Every string is written double-quoted with JSON's escapes (a subset of YAML's), so no
//! value can turn into another type or another document; keys are written plain when they are
//! plain words, quoted otherwise. Numbers, booleans and null are written as JSON writes them.

use serde_json::Value;

/// The values as a stream of YAML documents, each starting with `---`.
pub fn documents(values: &[Value]) -> String {
    let mut out = String::new();
    for value in values {
        out.push_str("---\n");
        block(value, 0, &mut out);
    }
    out
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => quoted(text),
        // serde_json writes numbers, booleans and null as YAML reads them.
        other => other.to_string(),
    }
}

/// `text` double-quoted: JSON's escapes, which YAML reads the same, plus YAML's own for the
/// three characters YAML takes as line breaks inside a quoted scalar and JSON leaves as they
/// are: U+0085 (`\N`), U+2028 (`\L`), U+2029 (`\P`).
fn quoted(text: &str) -> String {
    let json = Value::from(text).to_string();
    if !json.contains(['\u{85}', '\u{2028}', '\u{2029}']) {
        return json;
    }
    json.replace('\u{85}', "\\N")
        .replace('\u{2028}', "\\L")
        .replace('\u{2029}', "\\P")
}

/// True for a plain word that a YAML 1.1 reader (PyYAML, older Go YAML) takes as a boolean,
/// null or number: `on`, `yes`, `n`, `null`, `~`, `443`, `1.5`, `+1`.
fn other_type_in_yaml_1_1(k: &str) -> bool {
    const WORDS: [&str; 11] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", "",
    ];
    WORDS.contains(&k.to_ascii_lowercase().as_str())
        || k.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '.'))
}

fn key(k: &str) -> String {
    let plain = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && !k.starts_with(['-', '.'])
        && !other_type_in_yaml_1_1(k);
    if plain { k.to_owned() } else { quoted(k) }
}

fn is_empty_container(value: &Value) -> bool {
    matches!(value, Value::Object(m) if m.is_empty())
        || matches!(value, Value::Array(a) if a.is_empty())
}

/// Writes `value` as the body of a mapping entry or a document, at `indent` spaces.
fn block(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                out.push_str(&format!("{pad}{}:", key(k)));
                entry(v, indent, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                out.push_str(&format!("{pad}-"));
                match item {
                    Value::Object(map) if !map.is_empty() => {
                        // The first key on the dash's line, the rest aligned under it.
                        let mut first = true;
                        for (k, v) in map {
                            if first {
                                out.push_str(&format!(" {}:", key(k)));
                                first = false;
                            } else {
                                out.push_str(&format!("{pad}  {}:", key(k)));
                            }
                            entry(v, indent + 2, out);
                        }
                    }
                    Value::Array(inner) if !inner.is_empty() => {
                        out.push('\n');
                        block(item, indent + 2, out);
                    }
                    other => out.push_str(&format!(" {}\n", flow(other))),
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", flow(other))),
    }
}

/// After `key:` at `indent`: a scalar on the same line, or a nested block below.
fn entry(value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(_) | Value::Array(_) if !is_empty_container(value) => {
            out.push('\n');
            let nested = if value.is_array() { indent } else { indent + 2 };
            block(value, nested, out);
        }
        other => out.push_str(&format!(" {}\n", flow(other))),
    }
}

/// An empty object or array in flow style, or a scalar.
fn flow(value: &Value) -> String {
    match value {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        other => scalar(other),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn documents_are_block_yaml_with_quoted_strings() {
        let text = super::documents(&[
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x"}}, "spec": {"ports": [{"port": 3128, "protocol": "TCP"}], "selector": {}}}),
            json!({"list": [["a"], "b: c\n- d", true, null, 1.5], "empty": []}),
        ]);
        let want = r#"---
apiVersion: "v1"
kind: "Service"
metadata:
  labels:
    app.kubernetes.io/name: "x"
  name: "a"
spec:
  ports:
  - port: 3128
    protocol: "TCP"
  selector: {}
---
empty: []
list:
-
  - "a"
- "b: c\n- d"
- true
- null
- 1.5
"#;
        assert_eq!(text, want);
    }

    /// Keys a YAML 1.1 reader would take as booleans, null or numbers are quoted; ordinary
    /// keys (labels, field names) stay plain.
    #[test]
    fn keys_that_yaml_1_1_reads_as_other_types_are_quoted() {
        for k in [
            "on", "Off", "yes", "Y", "n", "true", "NULL", "443", "1.5", "+1",
        ] {
            let text = super::documents(&[json!({k: 1})]);
            assert_eq!(text, format!("---\n\"{k}\": 1\n"), "{k}");
        }
        for k in ["app.kubernetes.io/name", "port", "onion", "no-op", "x443"] {
            let text = super::documents(&[json!({k: 1})]);
            assert_eq!(text, format!("---\n{k}: 1\n"), "{k}");
        }
    }

    /// PyYAML (a YAML 1.1 reader) takes U+0085, U+2028 and U+2029 as line breaks inside a
    /// double-quoted scalar: they are written as YAML's escapes, in values and in keys.
    #[test]
    fn yaml_line_breaks_that_json_leaves_alone_are_escaped() {
        let text = super::documents(&[json!({"a\u{2028}b": "x\u{85}y\u{2028}z\u{2029}w"})]);
        assert_eq!(text, "---\n\"a\\Lb\": \"x\\Ny\\Lz\\Pw\"\n");
        assert!(!text.contains(['\u{85}', '\u{2028}', '\u{2029}']));
    }
}

//! A param value, checked: the first byte picks the command (a path under `tests`, an enum
//! after a prefix, an integer, a string with a pattern, a signed integer after a prefix) and
//! how the value arrives (a command-line word, a JSON string, a JSON integer); the rest is the
//! value. Never a panic, and an accepted value is exactly one argv element that keeps every
//! rule: no control or hidden character, no leading `-` as a whole element, a path lexically
//! inside `tests/`, an integer in range.
#![no_main]

use std::collections::BTreeMap;
use std::sync::LazyLock;

use agentguard_policy::{Arg, CommandAllowlist, ParamSpec, Value, is_hidden};
use libfuzzer_sys::fuzz_target;

/// The commands, their param, and the argv element the value lands in.
const COMMANDS: &[(&str, &str, usize)] = &[
    ("test_file", "path", 1),
    ("lint", "level", 1),
    ("bench", "rounds", 1),
    ("grep", "word", 2),
    ("seek", "offset", 1),
];

static LIST: LazyLock<CommandAllowlist> = LazyLock::new(|| {
    let spec = |kind: &str| ParamSpec {
        kind: kind.into(),
        ..ParamSpec::default()
    };
    let mut list = CommandAllowlist::new();
    let mut add = |name: &str, argv: &[&str], param: &str, spec: ParamSpec| {
        let argv = argv.iter().map(|s| (*s).to_owned()).collect();
        list.insert_with_params(name, argv, &BTreeMap::from([(param.to_owned(), spec)]))
            .unwrap();
    };
    add("test_file", &["pytest", "{path}"], "path", ParamSpec { under: Some("tests".into()), ..spec("path") });
    add("lint", &["ruff", "--level={level}"], "level", ParamSpec { values: Some(vec!["error".into(), "warning".into()]), ..spec("enum") });
    add("bench", &["bench", "{rounds}"], "rounds", ParamSpec { min: Some(1), max: Some(50), ..spec("integer") });
    add("grep", &["grep", "-r", "{word}"], "word", ParamSpec { pattern: Some("[A-Za-z0-9_.-]+".into()), ..spec("string") });
    add("seek", &["seek", "--offset={offset}"], "offset", ParamSpec { min: Some(-10), max: Some(10), ..spec("integer") });
    list
});

fuzz_target!(|data: &[u8]| {
    let Some((&selector, value)) = data.split_first() else {
        return;
    };
    let (name, param, at) = COMMANDS[usize::from(selector) % COMMANDS.len()];
    let arg = match (selector / 8) % 3 {
        0 => match std::str::from_utf8(value) {
            Ok(text) => Arg::Word(text.to_owned()),
            Err(_) => Arg::NotUtf8(String::from_utf8_lossy(value).into_owned()),
        },
        1 => Arg::Text(String::from_utf8_lossy(value).into_owned()),
        _ => {
            let mut bytes = [0u8; 16];
            let n = value.len().min(16);
            bytes[..n].copy_from_slice(&value[..n]);
            Arg::Integer(i128::from_le_bytes(bytes))
        }
    };
    let Ok(invocation) = LIST.invoke(name, &[(param.to_owned(), arg)]) else {
        return;
    };
    let argv = invocation.argv();
    assert_eq!(argv.len(), at + 1, "one element per value: {argv:?}");
    let element = &argv[at];
    assert!(!element.chars().any(|c| c.is_control() || is_hidden(c)), "{element:?}");
    assert!(!element.starts_with('-') || element.starts_with("--"), "{element:?}");
    match (name, &invocation.params()[0].1) {
        ("test_file", Value::Text(path)) => {
            assert_eq!(element, &format!("/workspace/{path}"));
            assert!(path == "tests" || path.starts_with("tests/"), "{path}");
            assert!(path.split('/').all(|c| !c.is_empty() && c != "." && c != ".."), "{path}");
        }
        ("lint", Value::Text(level)) => assert!(level == "error" || level == "warning"),
        ("bench", Value::Integer(n)) => {
            assert!((1..=50).contains(n));
            assert_eq!(element, &n.to_string());
        }
        ("grep", Value::Text(word)) => {
            assert_eq!(element, word);
            assert!(!word.starts_with('-'));
            assert!(word.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)));
        }
        ("seek", Value::Integer(n)) => {
            assert!((-10..=10).contains(n));
            assert_eq!(element, &format!("--offset={n}"));
        }
        other => panic!("a value of another type: {other:?}"),
    }
});

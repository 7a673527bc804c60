//! The typed params: the load rules, the placement, and an attack corpus that every rule must
//! refuse by name.

use std::collections::BTreeMap;

use crate::{Arg, CommandAllowlist, ParamSpec, Reason, Rule};

fn spec(kind: &str) -> ParamSpec {
    ParamSpec {
        kind: kind.into(),
        ..ParamSpec::default()
    }
}

fn path_spec() -> ParamSpec {
    ParamSpec {
        under: Some("tests".into()),
        ..spec("path")
    }
}

fn integer(min: i64, max: i64) -> ParamSpec {
    ParamSpec {
        min: Some(min),
        max: Some(max),
        ..spec("integer")
    }
}

fn string(pattern: &str) -> ParamSpec {
    ParamSpec {
        pattern: Some(pattern.into()),
        max_length: Some(64),
        ..spec("string")
    }
}

fn level() -> ParamSpec {
    ParamSpec {
        values: Some(vec!["error".into(), "warning".into()]),
        default: Some(Arg::Text("error".into())),
        ..spec("enum")
    }
}

/// The four commands of DESIGN.md's example, and one with a negative range after a prefix.
fn allowlist() -> CommandAllowlist {
    let mut list = CommandAllowlist::new();
    let one = |name: &str, spec: ParamSpec| BTreeMap::from([(name.to_owned(), spec)]);
    let argv = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    list.insert_with_params(
        "test_file",
        argv(&["python3", "-m", "pytest", "-q", "{path}"]),
        &one("path", path_spec()),
    )
    .unwrap();
    list.insert_with_params(
        "lint",
        argv(&["ruff", "--level={level}"]),
        &one("level", level()),
    )
    .unwrap();
    list.insert_with_params(
        "bench",
        argv(&["bench", "{rounds}"]),
        &one("rounds", integer(1, 50)),
    )
    .unwrap();
    list.insert_with_params(
        "grep",
        argv(&["grep", "-r", "{word}", "."]),
        &one("word", string("[A-Za-z0-9_]+")),
    )
    .unwrap();
    list.insert_with_params(
        "seek",
        argv(&["seek", "--offset={offset}"]),
        &one("offset", integer(-10, 10)),
    )
    .unwrap();
    list
}

fn word(param: &str, value: &str) -> Vec<(String, Arg)> {
    vec![(param.to_owned(), Arg::Word(value.to_owned()))]
}

/// The rule a refusal names, from its message (the message is what every front end shows).
fn refused_by(list: &CommandAllowlist, name: &str, args: &[(String, Arg)]) -> String {
    let denial = list.invoke(name, args).expect_err("refused");
    assert_eq!(denial.reason, Reason::InvalidArguments, "{denial}");
    let rule = denial
        .message
        .split("(rule ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap_or_default()
        .to_owned();
    assert!(
        Rule::ALL.iter().any(|r| r.code() == rule),
        "the message names a rule: {denial}"
    );
    rule
}

#[test]
fn accepted_values_become_exactly_one_argv_element_each() {
    let list = allowlist();
    let run = list
        .invoke("test_file", &word("path", "tests/test_api.py"))
        .unwrap();
    assert_eq!(
        run.argv(),
        [
            "python3",
            "-m",
            "pytest",
            "-q",
            "/workspace/tests/test_api.py"
        ]
    );
    // Lexical only, yet walked on the host when the workspace is there (no symlink along it).
    assert_eq!(run.host_checks().len(), 1);
    assert!(!run.host_checks()[0].must_exist);
    let spaced = list
        .invoke("test_file", &word("path", "tests/a b; rm -rf $HOME"))
        .unwrap();
    assert_eq!(spaced.argv()[4], "/workspace/tests/a b; rm -rf $HOME");
    assert_eq!(spaced.argv().len(), 5);
    let lint = list.invoke("lint", &[]).unwrap();
    assert_eq!(
        lint.argv(),
        ["ruff", "--level=error"],
        "the default applies"
    );
    let lint = list.invoke("lint", &[("level".into(), Arg::Null)]).unwrap();
    assert_eq!(lint.argv(), ["ruff", "--level=error"], "null is absent");
    let bench = list
        .invoke("bench", &[("rounds".into(), Arg::Integer(50))])
        .unwrap();
    assert_eq!(bench.argv(), ["bench", "50"]);
    assert_eq!(
        list.invoke("seek", &word("offset", "-3")).unwrap().argv(),
        ["seek", "--offset=-3"]
    );
    assert_eq!(
        list.invoke("grep", &word("word", "fn_main"))
            .unwrap()
            .argv(),
        ["grep", "-r", "fn_main", "."]
    );
}

#[test]
fn every_attack_of_the_corpus_is_refused_by_its_rule() {
    let list = allowlist();
    let mib = "a".repeat(1 << 20);
    let cases: &[(&str, &str, &str, &str)] = &[
        // Option injection, glued flags.
        ("grep", "word", "--output=x", "option"),
        ("grep", "word", "-cimport os", "option"),
        ("test_file", "path", "-rf", "option"),
        // Look-alikes of `-` (hyphen, non-breaking hyphen, en dash, minus, fullwidth) and `/`.
        ("grep", "word", "\u{2010}-output", "look_alike"),
        ("grep", "word", "\u{2011}x", "look_alike"),
        ("grep", "word", "\u{2013}x", "look_alike"),
        ("grep", "word", "\u{2212}x", "look_alike"),
        ("grep", "word", "\u{FF0D}x", "look_alike"),
        (
            "test_file",
            "path",
            "tests\u{2215}..\u{2215}etc",
            "look_alike",
        ),
        ("test_file", "path", "tests/\u{FF0F}etc", "look_alike"),
        (
            "test_file",
            "path",
            "tests/\u{2024}\u{2024}/x",
            "look_alike",
        ),
        // Traversal and its encodings.
        ("test_file", "path", "../etc/passwd", "traversal"),
        ("test_file", "path", "tests/../../etc/passwd", "traversal"),
        ("test_file", "path", "tests/%2e%2e/x", "encoded"),
        ("test_file", "path", "tests/%2E%2E%2Fx", "encoded"),
        ("test_file", "path", "tests\\..\\x", "encoded"),
        ("test_file", "path", "/etc/passwd", "absolute"),
        ("test_file", "path", "tests//x", "empty_component"),
        ("test_file", "path", "tests/", "empty_component"),
        ("test_file", "path", "", "empty_component"),
        ("test_file", "path", "tests/./x", "dot_component"),
        ("test_file", "path", "src/x.py", "outside"),
        ("test_file", "path", "testsuite/x.py", "outside"),
        // NUL, controls, line breaks, bidi and zero-width.
        ("grep", "word", "a\0b", "nul"),
        ("grep", "word", "a\nb", "newline"),
        ("grep", "word", "a\rb", "newline"),
        ("grep", "word", "a\u{2028}b", "newline"),
        ("grep", "word", "a\u{1b}[31mb", "control"),
        ("grep", "word", "a\u{7f}", "control"),
        ("grep", "word", "a\u{9b}b", "control"),
        ("test_file", "path", "tests/\u{202e}yp.txt", "hidden"),
        ("test_file", "path", "tests/a\u{200b}.py", "hidden"),
        ("grep", "word", "a\u{2066}b", "hidden"),
        // A megabyte.
        ("grep", "word", &mib, "too_long"),
        ("test_file", "path", &mib, "too_long"),
        ("lint", "level", &mib, "too_long"),
        ("bench", "rounds", &mib, "too_long"),
        // Every integer spelling but plain decimal.
        ("bench", "rounds", "+3", "not_decimal"),
        ("bench", "rounds", "03", "leading_zero"),
        ("bench", "rounds", "3.0", "not_decimal"),
        ("bench", "rounds", "1e1", "not_decimal"),
        ("bench", "rounds", "0x3", "not_decimal"),
        ("bench", "rounds", " 3", "not_decimal"),
        ("bench", "rounds", "3 ", "not_decimal"),
        ("bench", "rounds", "", "not_decimal"),
        ("bench", "rounds", "-3", "option"),
        ("bench", "rounds", "\u{0663}", "not_decimal"),
        ("bench", "rounds", "18446744073709551616", "out_of_range"),
        ("bench", "rounds", "99999999999999999999999", "out_of_range"),
        ("bench", "rounds", "0", "out_of_range"),
        ("bench", "rounds", "51", "out_of_range"),
        ("seek", "offset", "+3", "not_decimal"),
        ("seek", "offset", "--3", "not_decimal"),
        ("seek", "offset", "-11", "out_of_range"),
        // Enum: exact and case-sensitive; string: the whole value.
        ("lint", "level", "Error", "not_in_enum"),
        ("lint", "level", "error ", "not_in_enum"),
        ("grep", "word", "a b", "no_match"),
        ("grep", "word", "ok;rm", "no_match"),
        ("grep", "word", &"a".repeat(65), "too_long"),
    ];
    for (command, param, value, want) in cases {
        let got = refused_by(&list, command, &word(param, value));
        assert_eq!(&got, want, "{command} {param}={value:.40?}");
    }
}

#[test]
fn json_values_must_have_the_schemas_type() {
    let list = allowlist();
    let arg = |a: Arg| vec![("rounds".to_owned(), a)];
    for (value, want) in [
        (Arg::Text("3".into()), "wrong_type"),
        (Arg::Other("number"), "wrong_type"),
        (Arg::Other("boolean"), "wrong_type"),
        (Arg::Integer(1 << 64), "out_of_range"),
        (Arg::Integer(-3), "out_of_range"),
        (Arg::Null, "missing"),
    ] {
        assert_eq!(
            refused_by(&list, "bench", &arg(value.clone())),
            want,
            "{value:?}"
        );
    }
    let word_as = |a: Arg| vec![("word".to_owned(), a)];
    assert_eq!(
        refused_by(&list, "grep", &word_as(Arg::Integer(3))),
        "wrong_type"
    );
    let bad = word_as(Arg::NotUtf8("a\u{FFFD}".into()));
    assert_eq!(refused_by(&list, "grep", &bad), "not_utf8");
}

#[test]
fn missing_unknown_and_repeated_params_are_refused() {
    let list = allowlist();
    assert_eq!(refused_by(&list, "test_file", &[]), "missing");
    let extra = [word("path", "tests/a.py"), word("other", "x")].concat();
    assert_eq!(refused_by(&list, "test_file", &extra), "unknown");
    let twice = [word("path", "tests/a.py"), word("path", "tests/b.py")].concat();
    assert_eq!(refused_by(&list, "test_file", &twice), "repeated");
    let mut plain = CommandAllowlist::new();
    plain.insert("run_tests", ["pytest"]).unwrap();
    assert_eq!(refused_by(&plain, "run_tests", &word("x", "1")), "unknown");
    assert_eq!(plain.invoke("run_tests", &[]).unwrap().argv(), ["pytest"]);
    let off = plain.invoke("other", &[]).unwrap_err();
    assert_eq!(off.reason, Reason::CommandNotAllowed);
}

#[test]
fn a_refusal_names_the_command_the_param_the_rule_and_the_escaped_value() {
    let list = allowlist();
    let denial = list
        .invoke("test_file", &word("path", "../\u{1b}]52;c;x\u{7}"))
        .unwrap_err();
    let message = denial.message;
    assert!(message.starts_with("test_file: param path: "), "{message}");
    assert!(message.contains("(rule control;"), "{message}");
    assert!(
        message.contains(r#"value "../\u{1b}]52;c;x\u{7}""#),
        "{message}"
    );
    let long = list
        .invoke("grep", &word("word", &"é".repeat(5000)))
        .unwrap_err()
        .message;
    assert!(long.ends_with("... (10000 bytes))"), "{long}");
    assert!(long.len() < 400, "a long value is cut: {}", long.len());
}

fn load(argv: &[&str], params: &[(&str, ParamSpec)]) -> Result<(), String> {
    let params: BTreeMap<String, ParamSpec> = params
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let argv = argv.iter().map(|s| (*s).to_owned()).collect();
    CommandAllowlist::new()
        .insert_with_params("c", argv, &params)
        .map_err(|e| e.to_string())
}

#[test]
fn templates_and_declarations_are_checked_at_load() {
    let p = || ("p", string("[a-z]+"));
    let refused = [
        (
            load(&["x", "{p}{p}"], &[p()]),
            "one placeholder per element",
        ),
        (load(&["x", "{p}.py"], &[p()]), "nothing may follow it"),
        (load(&["{p}"], &[p()]), "the program is never a param"),
        (load(&["x", "{q}"], &[p()]), "names no declared param"),
        (load(&["x"], &[p()]), "no argv element uses {p}"),
        (load(&["x", "{p}"], &[("P", string("a"))]), "param name"),
        (
            load(&["x", "{p}"], &[("p", spec("float"))]),
            "not a param type",
        ),
        (
            load(&["x", "{p}"], &[("p", spec("string"))]),
            "needs a pattern",
        ),
        (
            load(&["x", "{p}"], &[("p", string("("))]),
            "not a regular expression",
        ),
        // Issue 34, item 15: anchoring the text would have closed the group it opened.
        (
            load(&["x", "{p}"], &[("p", string("a)|(.*"))]),
            "not a regular expression",
        ),
        (
            load(&["x", "{p}"], &[("p", spec("enum"))]),
            "at least one value",
        ),
        (load(&["x", "{p}"], &[("p", integer(5, 1))]), "above max"),
        (
            load(&["x", "{p}"], &[("p", integer(-1, 1))]),
            "whole argv element",
        ),
        (
            load(
                &["x", "{p}"],
                &[(
                    "p",
                    ParamSpec {
                        min: Some(1),
                        ..spec("integer")
                    },
                )],
            ),
            "needs both",
        ),
        (
            load(
                &["x", "{p}"],
                &[(
                    "p",
                    ParamSpec {
                        min: Some(1),
                        ..string("a")
                    },
                )],
            ),
            "has no `min`",
        ),
        (
            load(
                &["x", "{p}"],
                &[(
                    "p",
                    ParamSpec {
                        under: Some("../x".into()),
                        ..spec("path")
                    },
                )],
            ),
            "params.p.under",
        ),
        (
            load(
                &["x", "{p}"],
                &[(
                    "p",
                    ParamSpec {
                        path_kind: Some("link".into()),
                        ..spec("path")
                    },
                )],
            ),
            "not a path kind",
        ),
        (
            load(
                &["x", "{p}"],
                &[(
                    "p",
                    ParamSpec {
                        default: Some(Arg::Text("-x".into())),
                        ..string(".*")
                    },
                )],
            ),
            "params.p.default",
        ),
        (
            load(
                &["x", "{p}"],
                &[(
                    "p",
                    ParamSpec {
                        values: Some(vec!["-v".into()]),
                        ..spec("enum")
                    },
                )],
            ),
            "params.p.values",
        ),
        (
            load(
                &["x", "{p}"],
                &[(
                    "p",
                    ParamSpec {
                        default: Some(Arg::Text("3".into())),
                        ..integer(1, 5)
                    },
                )],
            ),
            "takes an integer",
        ),
    ];
    for (got, want) in refused {
        let err = got.expect_err(want);
        assert!(err.contains(want), "{want:?} in {err:?}");
    }
    assert!(load(&["x", "--v={p}"], &[("p", integer(-1, 1))]).is_ok());
    assert!(
        load(&["x", "{'a': 1}", "{}", "{P}"], &[]).is_ok(),
        "other braces are text"
    );
    assert!(
        load(&["x", "{p}"], &[])
            .unwrap_err()
            .contains("names no declared param")
    );
}

/// Issue 34, item 15: a value whose argv element the kernel would refuse (`MAX_ARG_STRLEN`,
/// E2BIG) is refused as `too_long` at check time, and so is an argv over `MAX_ARGV_BYTES`;
/// a command declares at most `MAX_PARAMS` params.
#[test]
fn r34_15_argv_elements_the_kernel_would_refuse_are_too_long() {
    let wide = ParamSpec {
        pattern: Some("[a-z€]+".into()),
        max_length: Some(65_536),
        ..spec("string")
    };
    let mut list = CommandAllowlist::new();
    let argv = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    list.insert_with_params(
        "echo",
        argv(&["echo", "{s}"]),
        &BTreeMap::from([("s".to_owned(), wide.clone())]),
    )
    .unwrap();
    // 65,536 ASCII characters fit in one argument; as many three-byte ones do not.
    assert!(list.invoke("echo", &word("s", &"a".repeat(65_536))).is_ok());
    let args = word("s", &"€".repeat(65_536));
    assert_eq!(refused_by(&list, "echo", &args), "too_long");
    let message = list.invoke("echo", &args).unwrap_err().message;
    assert!(message.contains("per argument"), "{message}");
    // Ten elements of 115,000 bytes each: each fits, the whole argv does not.
    let names: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    let mut template = vec!["echo".to_owned()];
    template.extend(names.iter().map(|n| format!("{{{n}}}")));
    let params: BTreeMap<String, ParamSpec> =
        names.iter().map(|n| (n.clone(), wide.clone())).collect();
    list.insert_with_params("many", template, &params).unwrap();
    let args: Vec<(String, Arg)> = names
        .iter()
        .map(|n| {
            (
                n.clone(),
                Arg::Word("a".repeat(40_000) + &"€".repeat(25_000)),
            )
        })
        .collect();
    assert_eq!(refused_by(&list, "many", &args), "too_long");
    let message = list.invoke("many", &args).unwrap_err().message;
    assert!(message.contains("in all"), "{message}");
    let too_many: BTreeMap<String, ParamSpec> = (0..=crate::MAX_PARAMS)
        .map(|i| (format!("p{i}"), string("[a-z]+")))
        .collect();
    let mut template = vec!["echo".to_owned()];
    template.extend(too_many.keys().map(|n| format!("{{{n}}}")));
    let error = list
        .insert_with_params("lots", template, &too_many)
        .unwrap_err();
    assert!(error.to_string().contains("at most 32"), "{error}");
}

#[test]
fn a_host_checked_path_is_handed_on_with_its_kind() {
    let mut list = CommandAllowlist::new();
    let checked = ParamSpec {
        path_kind: Some("file".into()),
        must_exist: Some(true),
        ..path_spec()
    };
    list.insert_with_params(
        "t",
        vec!["pytest".into(), "--file={path}".into()],
        &BTreeMap::from([("path".to_owned(), checked)]),
    )
    .unwrap();
    let run = list.invoke("t", &word("path", "tests/a.py")).unwrap();
    assert_eq!(run.argv(), ["pytest", "--file=/workspace/tests/a.py"]);
    assert_eq!(run.host_checks().len(), 1);
    assert_eq!(run.host_checks()[0].path, "tests/a.py");
    assert_eq!(run.host_checks()[0].kind, crate::PathKind::File);
    assert_eq!(
        run.params(),
        [("path".to_owned(), crate::Value::Text("tests/a.py".into()))]
    );
}

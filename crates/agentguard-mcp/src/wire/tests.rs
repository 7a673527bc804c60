//! Every line shape of issue 34, items 13 and 14, read as the gate reads it.

use super::*;

fn unreadable(line: &[u8]) -> i64 {
    match read(line) {
        Line::Unreadable(code, _) => code,
        other => panic!("{:?} was read as {other:?}", String::from_utf8_lossy(line)),
    }
}

fn decided(line: &str, initialized: bool) -> Call {
    match read(line.as_bytes()) {
        Line::Message { method, params, .. } => {
            assert_eq!(method, "tools/call");
            call(params, initialized)
        }
        other => panic!("{line} was read as {other:?}"),
    }
}

#[test]
fn lines_that_are_no_message_are_named() {
    assert_eq!(unreadable(b"not json"), -32700);
    assert_eq!(unreadable(b"\xff\xfe{}"), -32700);
    assert_eq!(
        unreadable(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]"),
        -32600
    );
    assert_eq!(
        unreadable(br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#),
        -32600
    );
    assert_eq!(
        unreadable(br#"{"jsonrpc":"2.0","id":1,"method":7}"#),
        -32600
    );
    let mut huge = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":""#.to_vec();
    huge.resize(MAX_LINE_BYTES + 10, b'a');
    assert_eq!(unreadable(&huge), -32600);
}

#[test]
fn a_message_keeps_its_raw_id_and_says_whether_it_reads_strictly() {
    let Line::Message {
        id, method, strict, ..
    } = read(br#"{"jsonrpc":"2.0","id":"a-1","method":"tools/list"}"#)
    else {
        panic!("a message")
    };
    assert_eq!(
        (id.unwrap().get(), method.as_str(), strict),
        ("\"a-1\"", "tools/list", true)
    );
    for loose in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"a":1,"a":2}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":1e400}}"#,
    ] {
        let Line::Message { strict, .. } = read(loose.as_bytes()) else {
            panic!("{loose}")
        };
        assert!(!strict, "{loose}");
    }
}

#[test]
fn calls_rmcp_would_refuse_are_refused_by_name() {
    let refused = |line: &str| match decided(line, true) {
        Call::Refused(reason, tool, why) => (reason, tool, why),
        other => panic!("{line}: {other:?}"),
    };
    let (reason, tool, why) = refused(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ok","arguments":[1]}}"#,
    );
    assert_eq!((reason, tool.as_str()), ("invalid_request", "ok"));
    assert!(why.contains("arguments"), "{why}");
    let (_, _, why) =
        refused(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":5}}"#);
    assert!(why.contains("not a string"), "{why}");
    let (_, _, why) = refused(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ok","name":"word"}}"#,
    );
    assert!(why.contains("more than once"), "{why}");
    let (_, _, why) = refused(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call"}"#);
    assert!(why.contains("params"), "{why}");
    // Before `initialize`, without the stateless protocol's _meta.
    let before = decided(
        r#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"ok"}}"#,
        false,
    );
    assert!(
        matches!(before, Call::Refused("not_initialized", ref t, _) if t == "ok"),
        "{before:?}"
    );
    let modern = decided(
        r#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"ok","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        false,
    );
    assert_eq!(modern, Call::Forward);
}

#[test]
fn argument_values_only_the_raw_reading_sees_are_named() {
    let arguments = |line: &str| match decided(line, true) {
        Call::Arguments(tool, args) => (tool, args),
        other => panic!("{line}: {other:?}"),
    };
    let (tool, args) = arguments(
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"num","arguments":{"n":99,"n":7}}}"#,
    );
    assert_eq!(tool, "num");
    assert_eq!(
        args,
        vec![
            ("n".to_owned(), Arg::Integer(99)),
            ("n".to_owned(), Arg::Integer(7))
        ]
    );
    let (_, args) = arguments(
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"num","arguments":{"n":1e400}}}"#,
    );
    assert_eq!(
        args,
        vec![("n".to_owned(), Arg::Other("number out of range"))]
    );
    let (_, args) = arguments(
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"word","arguments":{"w":"\ud800"}}}"#,
    );
    assert!(matches!(&args[0].1, Arg::NotUtf8(_)), "{args:?}");
    // Plain values go to rmcp and the server as they are.
    assert_eq!(
        decided(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"num","arguments":{"n":-0}}}"#,
            true
        ),
        Call::Forward
    );
    assert_eq!(
        decided(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ok","arguments":null}}"#,
            true
        ),
        Call::Forward
    );
}

//! `agentguard mcp` against a client that breaks the wire (issue 34, items 13 and 14), in raw
//! JSON-RPC: every line gets an answer and the server goes on; every `tools/call` that reaches
//! the server gets exactly one `mcp_call` event with its reason, in the verified log.

use std::io::Write;
use std::path::{Path, PathBuf};

use agentguard_test_support::FakeEngine;
use serde_json::{Value, json};

use crate::mcp::{Server, audited, initialize};

fn config(dir: &Path, engine: &FakeEngine) -> PathBuf {
    let path = dir.join("agentguard.toml");
    std::fs::write(
        &path,
        format!(
            r#"image = "localhost/tools:latest"
engine = "{}"
[commands]
ok = ["true"]
[commands.num]
argv = ["echo", "--n={{n}}"]
[commands.num.params.n]
type = "integer"
min = -5
max = 5
[commands.word]
argv = ["echo", "{{w}}"]
[commands.word.params.w]
type = "string"
pattern = "[a-z]+"
[audit]
path = "audit.jsonl"
"#,
            engine.path().display()
        ),
    )
    .unwrap();
    path
}

/// Writes `raw` and a newline as one line, whatever its bytes.
fn send_raw(server: &mut Server, raw: &[u8]) {
    let stdin = server.child.stdin.as_mut().unwrap();
    stdin.write_all(raw).unwrap();
    stdin.write_all(b"\n").unwrap();
    stdin.flush().unwrap();
}

fn call(id: u64, params: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#).into_bytes()
}

#[test]
fn r34_13_every_call_that_reaches_the_server_leaves_one_event() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let mut server = Server::start_with(&config(dir.path(), &engine), &[]);
    // Before `initialize`: answered, and recorded as not_initialized.
    send_raw(&mut server, &call(1, r#"{"name":"ok"}"#));
    let early = server.next();
    assert_eq!(
        (early["id"].clone(), early["error"]["code"].clone()),
        (json!(1), json!(-32602))
    );
    initialize(&mut server, "wire", "3");
    let mut answers = Vec::new();
    for (id, params) in [
        (2, r#"{"name":"ok","arguments":[1]}"#),
        (3, r#"{"name":5}"#),
        (4, r#"{"name":"ok","name":"num"}"#),
    ] {
        send_raw(&mut server, &call(id, params));
        let answer = server.next();
        assert_eq!(answer["id"], id, "{answer}");
        answers.push(answer);
    }
    for answer in &answers {
        assert_eq!(
            answer["error"]["code"], -32602,
            "not method-not-found: {answer}"
        );
    }
    let message = answers[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("arguments"), "{message}");
    drop(server.child.stdin.take());
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    let calls = audited(dir.path(), "mcp_call");
    let reasons: Vec<&str> = calls
        .iter()
        .map(|c| c["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            "not_initialized",
            "invalid_request",
            "invalid_request",
            "invalid_request"
        ],
        "{calls:?}"
    );
    assert_eq!(calls[1]["subject"]["tool"], "ok");
    assert_eq!(calls[1]["subject"]["mcp_client"], "wire/3");
}

#[test]
fn r34_14_every_line_gets_an_answer_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let mut server = Server::start_with(&config(dir.path(), &engine), &[]);
    initialize(&mut server, "wire", "3");
    for (raw, code) in [
        (b"not json".to_vec(), -32700),
        (b"\xff\xfe{}".to_vec(), -32700),
        (
            b"[{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}]".to_vec(),
            -32600,
        ),
    ] {
        send_raw(&mut server, &raw);
        let answer = server.next();
        assert_eq!(
            (answer["id"].clone(), answer["error"]["code"].clone()),
            (Value::Null, json!(code))
        );
    }
    // Over 16 MiB: answered, skipped, and the next line is served.
    let mut huge = br#"{"jsonrpc":"2.0","id":10,"method":"ping","params":{"x":""#.to_vec();
    huge.resize(16 * 1024 * 1024 + 100, b'a');
    send_raw(&mut server, &huge);
    let answer = server.next();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let (listed, _) = server.request(json!({"jsonrpc": "2.0", "id": 11, "method": "tools/list"}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    // Values only a raw reading sees: refused by the validator, recorded.
    let mut results = Vec::new();
    for (id, params) in [
        (12, r#"{"name":"num","arguments":{"n":1e400}}"#),
        (13, r#"{"name":"word","arguments":{"w":"\ud800"}}"#),
        (14, r#"{"name":"num","arguments":{"n":4,"n":1}}"#),
        (15, r#"{"name":"num","arguments":{"n":-0}}"#),
    ] {
        send_raw(&mut server, &call(id, params));
        let answer = server.next();
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        results.push(answer["result"]["structuredContent"].clone());
    }
    for result in &results {
        assert_eq!(result["reason"], "invalid_arguments", "{result}");
    }
    let message = |i: usize| results[i]["message"].as_str().unwrap().to_owned();
    assert!(message(0).contains("wrong_type"), "{}", message(0));
    assert!(message(1).contains("not_utf8"), "{}", message(1));
    assert!(message(2).contains("repeated"), "{}", message(2));
    assert!(
        message(3).contains("negative zero") && !message(3).contains("fraction"),
        "{}",
        message(3)
    );
    drop(server.child.stdin.take());
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    assert!(
        engine.calls().iter().all(|c| !c.contains("--n=")),
        "nothing ran"
    );
    let calls = audited(dir.path(), "mcp_call");
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert!(
        calls.iter().all(|c| c["reason"] == "invalid_arguments"),
        "{calls:?}"
    );
}

//! Tools with typed params, against rmcp's client in both eras: the schema is generated from
//! the params, and every call is decided by the policy crate's validator (the JSON type
//! included), never by the schema alone; a refusal starts nothing and is recorded twice, as
//! the run's `container_run` and the call's `mcp_call`.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentguard_audit::{AuditSink, Decision, Kind, MemorySink};
use agentguard_container::{ContainerSpec, Engine};
use agentguard_mcp::{Format, McpServer, ToolSet};
use agentguard_policy::{Arg, ParamSpec};
use agentguard_sandbox::Sandbox;
use agentguard_test_support::FakeEngine;
use serde_json::{Value, json};

use crate::{ERAS, Fixture, call, object};

fn param(kind: &str) -> ParamSpec {
    ParamSpec {
        kind: kind.into(),
        ..ParamSpec::default()
    }
}

/// A server whose `test_file` takes a checked path under `tests/` and `bench` an integer
/// with an optional enum; `printf '[%s]'` shows each argv element.
fn fixture(ws: &std::path::Path) -> (Fixture, ToolSet) {
    std::fs::create_dir_all(ws.join("tests")).unwrap();
    std::fs::write(ws.join("tests/test_api.py"), "").unwrap();
    let engine = FakeEngine::new();
    let path = ParamSpec {
        description: Some("A test file under tests/".into()),
        under: Some("tests".into()),
        path_kind: Some("file".into()),
        must_exist: Some(true),
        ..param("path")
    };
    let rounds = ParamSpec {
        min: Some(1),
        max: Some(50),
        ..param("integer")
    };
    let level = ParamSpec {
        values: Some(vec!["error".into(), "warning".into()]),
        default: Some(Arg::Text("error".into())),
        ..param("enum")
    };
    let spec = ContainerSpec::builder("localhost/tools:latest")
        .engine(Engine::parse(&engine.path().to_string_lossy()).unwrap())
        .workspace(ws)
        .command_with_params(
            "test_file",
            vec!["printf".into(), "[%s]".into(), "{path}".into()],
            BTreeMap::from([("path".to_owned(), path)]),
        )
        .command_with_params(
            "bench",
            vec![
                "printf".into(),
                "[%s]".into(),
                "{rounds}".into(),
                "--level={level}".into(),
            ],
            BTreeMap::from([("rounds".to_owned(), rounds), ("level".to_owned(), level)]),
        )
        .build()
        .unwrap();
    let audit = Arc::new(MemorySink::new(None));
    let sandbox = Sandbox::builder(spec)
        .audit(Arc::clone(&audit) as Arc<dyn AuditSink>)
        .build()
        .unwrap();
    let tools = ToolSet::new(&sandbox, &BTreeMap::new(), None).unwrap();
    let server = McpServer::builder(sandbox, tools.clone())
        .audit(Arc::clone(&audit) as Arc<dyn AuditSink>)
        .build()
        .unwrap();
    let fixture = Fixture {
        engine,
        audit,
        server,
    };
    (fixture, tools)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_schema_comes_from_the_params_in_every_format() {
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().canonicalize().unwrap();
    let bench = json!({
        "type": "object",
        "properties": {
            "level": {"type": "string", "enum": ["error", "warning"], "description": "Default: error.", "default": "error"},
            "rounds": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "required": ["rounds"],
        "additionalProperties": false,
    });
    for era in ERAS {
        // One server per connection, as with stdio: the end of the input ends the server.
        let (fixture, _) = fixture(&ws);
        let client = fixture.connect(era).await;
        let listed = client.list_all_tools().await.unwrap();
        let schema = |name: &str| {
            let tool = listed.iter().find(|t| t.name == name).unwrap();
            Value::Object((*tool.input_schema).clone())
        };
        assert_eq!(schema("bench"), bench, "{era:?}");
        let file = schema("test_file");
        assert_eq!(file["required"], json!(["path"]));
        assert_eq!(file["properties"]["path"]["type"], "string");
        assert!(
            file["properties"]["path"]["description"]
                .as_str()
                .unwrap()
                .starts_with(
                    "A test file under tests/ A path relative to the workspace, inside tests/"
                ),
            "{file}"
        );
        client.cancel().await.unwrap();
    }
    let (_, tools) = fixture(&ws);
    let openai = tools.export(Format::Openai);
    let bench_fn = openai
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "bench")
        .unwrap();
    assert_eq!(bench_fn["strict"], true);
    assert_eq!(
        bench_fn["parameters"]["required"],
        json!(["level", "rounds"]),
        "strict mode: every property required"
    );
    assert_eq!(
        bench_fn["parameters"]["properties"]["level"]["type"],
        json!(["string", "null"]),
        "an optional param takes null, which means its default"
    );
    let anthropic = tools.export(Format::Anthropic);
    let bench_tool = anthropic
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "bench")
        .unwrap();
    assert_eq!(bench_tool["input_schema"], bench);
}

#[tokio::test(flavor = "multi_thread")]
async fn our_validator_decides_every_call_never_the_schema_alone() {
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().canonicalize().unwrap();
    for era in ERAS {
        let (fixture, _) = fixture(&ws);
        let client = fixture.connect(era).await;
        for (tool, args, want) in [
            (
                "test_file",
                json!({"path": "tests/test_api.py"}),
                Ok("[/workspace/tests/test_api.py]"),
            ),
            ("bench", json!({"rounds": 7}), Ok("[7][--level=error]")),
            (
                "bench",
                json!({"rounds": 7, "level": null}),
                Ok("[7][--level=error]"),
            ),
            (
                "bench",
                json!({"rounds": 7, "level": "warning"}),
                Ok("[7][--level=warning]"),
            ),
            (
                "test_file",
                json!({"path": "tests/../../etc/passwd"}),
                Err("traversal"),
            ),
            ("test_file", json!({"path": "/etc/passwd"}), Err("absolute")),
            (
                "test_file",
                json!({"path": "tests/missing.py"}),
                Err("not_found"),
            ),
            ("test_file", json!({}), Err("missing")),
            (
                "test_file",
                json!({"path": "tests/test_api.py", "x": 1}),
                Err("unknown"),
            ),
            ("bench", json!({"rounds": "7"}), Err("wrong_type")),
            ("bench", json!({"rounds": 7.0}), Err("wrong_type")),
            (
                "bench",
                json!({"rounds": 18446744073709551616_u128 as f64}),
                Err("wrong_type"),
            ),
            ("bench", json!({"rounds": 51}), Err("out_of_range")),
            (
                "bench",
                json!({"rounds": 7, "level": "ERROR"}),
                Err("not_in_enum"),
            ),
            (
                "bench",
                json!({"rounds": 7, "level": ["error"]}),
                Err("wrong_type"),
            ),
        ] {
            let calls_before = fixture.engine.calls().len();
            let result = client
                .call_tool(call(tool, Some(args.clone())))
                .await
                .unwrap();
            let got = object(&result);
            match want {
                Ok(stdout) => {
                    assert_eq!(got["stdout"], stdout, "{era:?} {tool} {args}: {got}");
                    assert_eq!(result.is_error, Some(false));
                }
                Err(rule) => {
                    assert_eq!(result.is_error, Some(true), "{era:?} {tool} {args}");
                    assert_eq!(got["reason"], "invalid_arguments", "{got}");
                    assert_eq!(got["status"], "denied");
                    let message = got["message"].as_str().unwrap();
                    assert!(
                        message.contains(&format!("{tool}: param "))
                            && message.contains(&format!("(rule {rule};")),
                        "{era:?} {args}: {message}"
                    );
                    assert_eq!(
                        fixture.engine.calls().len(),
                        calls_before,
                        "nothing started: {args}"
                    );
                }
            }
        }
        client.cancel().await.unwrap();
        recorded(&fixture);
    }
}

/// The audit of one connection's calls: a call and a run event each, with the values.
fn recorded(fixture: &Fixture) {
    let records = fixture.audit.records();
    let calls: Vec<_> = records.iter().filter(|r| r.kind == Kind::McpCall).collect();
    let runs: Vec<_> = records
        .iter()
        .filter(|r| r.kind == Kind::ContainerRun)
        .collect();
    assert_eq!(
        (calls.len(), runs.len()),
        (15, 15),
        "a call and a run event each"
    );
    assert_eq!(
        calls[0].data["params"],
        json!({"path": "tests/test_api.py"})
    );
    assert_eq!(runs[0].data["params"], json!({"path": "tests/test_api.py"}));
    assert_eq!(
        calls[1].data["params"],
        json!({"level": "error", "rounds": 7})
    );
    assert_eq!(
        (calls[4].decision, calls[4].reason.as_str()),
        (Decision::Deny, "invalid_arguments")
    );
    assert_eq!(runs[4].reason, "invalid_arguments");
    let message = runs[4].data["message"].as_str().unwrap();
    assert!(message.contains("param path"), "{message}");
}

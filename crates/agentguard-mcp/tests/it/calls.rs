//! `tools/list` and one call per outcome, in both eras.

use agentguard_audit::{Decision, Kind};
use serde_json::{Value, json};

use crate::{ERAS, Fixture, call, object};

#[tokio::test(flavor = "multi_thread")]
async fn the_tool_list_is_the_allowlist_with_no_input_and_factual_descriptions() {
    for era in ERAS {
        // One server per connection, as with stdio: the end of the input ends the server.
        let fixture = Fixture::new(60, false, 2);
        let client = fixture.connect(era).await;
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "engine_error",
                "flood",
                "noisy",
                "ok",
                "second",
                "sleepy",
                "three"
            ],
            "{era:?}: sorted, one per allowlisted command"
        );
        for tool in &tools {
            assert_eq!(
                Value::Object((*tool.input_schema).clone()),
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
                "{era:?}: {} accepts nothing",
                tool.name
            );
        }
        let ok = tools.iter().find(|t| t.name == "ok").unwrap();
        let description = ok.description.as_deref().unwrap();
        assert!(
            description.starts_with("Say all is good. Runs the allowlisted command ok (echo all good) in a hardened container: no network, no workspace, 60 s timeout, output capped at 4096 bytes."),
            "{era:?}: {description}"
        );
        assert!(!description.contains('\u{1b}') && !description.contains('\u{202e}'));
        let hints = ok.annotations.as_ref().unwrap();
        assert_eq!(
            (hints.read_only_hint, hints.open_world_hint),
            (Some(true), Some(false))
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_outcome_has_its_status_reason_and_is_error() {
    for era in ERAS {
        let fixture = Fixture::new(60, false, 2);
        let client = fixture.connect(era).await;
        for (tool, args, status, reason, is_error) in [
            ("ok", None, "exited", "ok", false),
            ("three", None, "exited", "command_failed", false),
            ("flood", None, "output_limit", "output_limit", true),
            ("engine_error", None, "error", "engine_error", true),
            (
                "ok",
                Some(json!({"cmd": "rm -rf /"})),
                "denied",
                "arguments_not_accepted",
                true,
            ),
        ] {
            let result = client.call_tool(call(tool, args)).await.unwrap();
            let value = object(&result);
            assert_eq!(
                (
                    value["status"].as_str(),
                    value["reason"].as_str(),
                    result.is_error
                ),
                (Some(status), Some(reason), Some(is_error)),
                "{era:?} {tool}: {value}"
            );
        }
        let ok = object(&client.call_tool(call("ok", None)).await.unwrap());
        assert_eq!(
            (ok["stdout"].as_str(), ok["exit_code"].as_i64()),
            (Some("all good\n"), Some(0))
        );
        assert_eq!(
            ok["egress"],
            json!({"allowed": 0, "denied": 0, "refused": []})
        );
        let three = object(&client.call_tool(call("three", None)).await.unwrap());
        assert_eq!(
            (three["exit_code"].as_i64(), three["stderr"].as_str()),
            (Some(3), Some("failing\n"))
        );
        let flood = object(&client.call_tool(call("flood", None)).await.unwrap());
        assert_eq!(flood["truncated"], true);
        // An unknown tool is a protocol error (-32602), not a result.
        let unknown = client.call_tool(call("rm", None)).await.unwrap_err();
        assert!(format!("{unknown:?}").contains("-32602"), "{unknown:?}");
        assert!(
            fixture.engine.calls().iter().all(|c| !c.contains("rm -rf")),
            "refused arguments never reach the engine"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_check_a_non_zero_exit_is_an_error() {
    let fixture = Fixture::new(60, true, 2);
    let client = fixture.connect(crate::Era::Modern).await;
    let result = client.call_tool(call("three", None)).await.unwrap();
    let value = object(&result);
    assert_eq!(
        (result.is_error, value["status"].as_str()),
        (Some(true), Some("exited"))
    );
    let ok = client.call_tool(call("ok", None)).await.unwrap();
    assert_eq!(ok.is_error, Some(false));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_kills_the_container_and_is_an_error() {
    let fixture = Fixture::new(1, false, 2);
    let client = fixture.connect(crate::Era::Legacy).await;
    let result = client.call_tool(call("sleepy", None)).await.unwrap();
    let value = object(&result);
    assert_eq!(
        (value["status"].as_str(), result.is_error),
        (Some("timed_out"), Some(true))
    );
    assert!(
        fixture
            .engine
            .events()
            .iter()
            .any(|e| e.starts_with("killed")),
        "{:?}",
        fixture.engine.events()
    );
    assert!(fixture.engine.running().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn output_is_stripped_of_escapes_and_invisible_characters() {
    let fixture = Fixture::new(60, false, 2);
    let client = fixture.connect(crate::Era::Modern).await;
    let value = object(&client.call_tool(call("noisy", None)).await.unwrap());
    assert_eq!(value["stdout"], "red evil zw\n", "{value}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_is_audited_with_the_client_and_chained_with_its_run() {
    let fixture = Fixture::new(60, false, 2);
    let client = fixture.connect(crate::Era::Legacy).await;
    let value = object(&client.call_tool(call("ok", None)).await.unwrap());
    client
        .call_tool(call("ok", Some(json!({"x": 1}))))
        .await
        .unwrap();
    let records = fixture.audit.records();
    let run = records
        .iter()
        .find(|r| r.kind == Kind::ContainerRun)
        .unwrap();
    let calls: Vec<_> = records.iter().filter(|r| r.kind == Kind::McpCall).collect();
    assert_eq!(calls.len(), 2, "{records:?}");
    assert_eq!(
        (calls[0].decision, calls[0].reason.as_str()),
        (Decision::Allow, "ok")
    );
    assert_eq!(calls[0].subject["tool"], "ok");
    assert_eq!(calls[0].subject["mcp_client"], "agentguard-tests/7.1");
    assert_eq!(calls[0].data["container"], value["container"]);
    assert_eq!(
        run.data["container"], value["container"],
        "the run it caused, by name"
    );
    assert!(calls[0].data["request_id"].is_string());
    assert_eq!(calls[0].data["exit_code"], 0);
    assert_eq!(
        (calls[1].decision, calls[1].reason.as_str()),
        (Decision::Deny, "arguments_not_accepted")
    );
    assert!(
        run.seq < calls[0].seq,
        "the run is recorded before the call that caused it"
    );
}

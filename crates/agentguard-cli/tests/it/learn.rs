//! The learn loop without an engine (issue 36): a run names what its proxy refused, an
//! observe run lets a public host through and records it as `observed` while a private one
//! stays refused, `policy suggest` turns the verified log into the config lines, `--write`
//! applies them, and the same command then runs without those refusals. The relay, the
//! proxy, the DNS server, the TLS upstream and curl are real; the engine is the fake one.

use crate::egress_run::{World, blocking};
use crate::{agentguard, stderr, stdout};

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(stdout(out).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

#[tokio::test(flavor = "multi_thread")]
async fn observe_then_suggest_then_write_closes_the_loop() {
    let world = World::start().await;
    let port = world.upstream.addr().port();
    let world = blocking(move || {
        let log = world.dir.path().join("audit.jsonl");
        let log = log.to_str().unwrap().to_owned();
        let config = world.config.to_str().unwrap().to_owned();
        let evil = format!("evil.example.test:{port}");
        let private = format!("private.example.test:{port}");

        // A plain run refuses both names off the list, before any DNS query.
        let value = json(&world.run(&["learn", "--json"]));
        assert_eq!(value["egress"]["denied"], 2, "{value}");
        assert!(value["egress"].get("observed").is_none(), "{value}");

        // The observe run: loud at start and end; the public name is let through and
        // recorded as observed, the private one is still refused.
        let out = world.run(&["--observe", "learn", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("observe: THE POLICY IS NOT ENFORCED"),
            "{said}"
        );
        assert!(
            said.contains("1 target would have been refused (1 request)"),
            "{said}"
        );
        let value = json(&out);
        assert_eq!(value["egress"]["observed"], 1, "{value}");
        assert_eq!(
            value["egress"]["observed_targets"][0]["target"],
            evil.as_str()
        );
        assert_eq!(value["egress"]["observed_targets"][0]["reason"], "observed");
        assert_eq!(value["egress"]["allowed"], 2, "{value}");
        assert_eq!(value["egress"]["refused"][0]["target"], private.as_str());
        assert_eq!(
            value["egress"]["refused"][0]["reason"],
            "non_public_address"
        );
        let observed: Vec<_> = world
            .audit()
            .into_iter()
            .filter(|e| e["kind"] == "egress_connect" && e["reason"] == "observed")
            .collect();
        assert_eq!(observed.len(), 1, "{observed:?}");
        assert_eq!(observed[0]["decision"], "allow");
        assert_eq!(observed[0]["subject"]["target"], evil.as_str());

        // A command without a network has nothing to observe: a usage error.
        let out = world.run(&["--observe", "offline"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("network = \"none\""),
            "{}",
            stderr(&out)
        );

        // Without a config: everything the logs saw refused or observed, exact names.
        let out = agentguard(&["policy", "suggest", &log]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = stdout(&out);
        assert!(text.contains("[commands.learn]"), "{text}");
        assert!(text.contains("\"evil.example.test\""), "{text}");
        assert!(text.contains("# seen 2 times, last "), "{text}");
        assert!(!text.contains("\"private.example.test\""), "{text}");
        assert!(
            text.contains(&format!("learn: {private} (non_public_address)")),
            "never suggested: {text}"
        );

        // Against the config: the complete new value, as TOML and as JSON.
        let out = agentguard(&[
            "policy", "suggest", &log, "--config", &config, "--format", "json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let value = json(&out);
        let changes = value["changes"].as_array().unwrap();
        assert_eq!(changes.len(), 1, "the port is allowed already: {value}");
        assert_eq!(changes[0]["table"], "commands.learn");
        assert_eq!(changes[0]["key"], "egress_allow");
        assert_eq!(
            changes[0]["value"],
            serde_json::json!(["good.example.test", "evil.example.test"])
        );
        assert_eq!(changes[0]["added"][0]["count"], 2, "{value}");

        // --write changes exactly that, keeps the comment, and the command runs without it.
        let out = agentguard(&["policy", "suggest", &log, "--config", &config, "--write"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let written = std::fs::read_to_string(&config).unwrap();
        assert!(written.starts_with("# The test's config"), "{written}");
        let value = json(&world.run(&["learn", "--json"]));
        assert_eq!(
            value["egress"]["denied"], 1,
            "only the private name: {value}"
        );
        assert_eq!(value["egress"]["refused"][0]["target"], private.as_str());
        let out = agentguard(&["policy", "suggest", &log, "--config", &config]);
        assert!(
            stdout(&out).contains("# nothing to suggest"),
            "{}",
            stdout(&out)
        );
        world
    })
    .await;
    let _ = world;
}

#[test]
fn suggest_refuses_a_log_that_does_not_verify_and_write_needs_a_config() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let events = [agentguard_audit::Event::egress_connect(
        agentguard_audit::Decision::Deny,
        "domain_not_allowed",
        "files.example.test:443",
        "127.0.0.1:5",
    )];
    {
        let audit = agentguard_audit::AuditLog::open(&log, Default::default()).unwrap();
        for event in events {
            agentguard_audit::AuditSink::record(&audit, event).unwrap();
        }
    }
    let log_text = log.to_str().unwrap();
    let out = agentguard(&["policy", "suggest", log_text]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A standalone proxy's event names no run: it belongs to [egress] allow.
    assert!(
        stdout(&out).contains("[egress]\nallow = ["),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("\"files.example.test\""),
        "{}",
        stdout(&out)
    );
    // One changed byte: refused whole, naming the log.
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, text.replace("files.example", "filez.example")).unwrap();
    let out = agentguard(&["policy", "suggest", log_text]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("reads only logs that verify"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let out = agentguard(&["policy", "suggest", log_text, "--write"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // A config that does not load is neither compared with nor written to.
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, text.replace("filez.example", "files.example")).unwrap();
    let config = dir.path().join("agentguard.toml");
    std::fs::write(&config, "image = \"i\"\ntimout = 5\n").unwrap();
    let config_text = config.to_str().unwrap();
    let out = agentguard(&[
        "policy",
        "suggest",
        log_text,
        "--config",
        config_text,
        "--write",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not load"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "image = \"i\"\ntimout = 5\n"
    );
}

/// Only a person starts an observe run: `mcp` and `tools` have no such option, and an agent's
/// `observe` argument is an unknown param, refused before anything starts.
#[test]
fn mcp_and_tools_have_no_observe() {
    use serde_json::json;
    for args in [&["mcp", "--observe"][..], &["tools", "--observe"]] {
        let out = agentguard(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--observe"), "{}", stderr(&out));
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = agentguard_test_support::FakeEngine::new();
    let config = crate::mcp::config(dir.path(), &engine);
    let mut server = crate::mcp::Server::start_with(&config, &[]);
    crate::mcp::initialize(&mut server, "learn", "1");
    let (list, _) = server.request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    assert!(!list.to_string().contains("observe"), "{list}");
    let (call, _) = server.request(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "ok", "arguments": {"observe": true}}}));
    let result = &call["result"]["structuredContent"];
    assert_eq!(result["reason"], "arguments_not_accepted", "{call}");
    assert_eq!(result["status"], "denied", "{call}");
    assert!(engine.calls().is_empty(), "nothing started");
}

/// A cluster's proxy is shared: an observe run there is refused before anything starts.
#[test]
fn a_cluster_run_refuses_observe() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::cluster::config(dir.path(), 60);
    let out = agentguard(&["run", "--config", &config, "--observe", "install"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--observe is for the container engines"),
        "{}",
        stderr(&out)
    );
}

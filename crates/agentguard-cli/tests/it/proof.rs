//! Issue 37, item 1: every `container_run` event says what ran: the `image_id` the engine ran
//! (read from the engine, and the run names the image by it), the exact `argv` with params
//! substituted, the `config_sha256` of the file in force, the `invoker` and the
//! `agentguard_version`. The engine is test-support's fake (its image ID is 64 `a`s); real
//! engines are in e2e (`the_recorded_image_id_is_the_engines`).

use std::path::Path;

use agentguard_test_support::FakeEngine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{agentguard, stderr};

const FAKE_ID: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn write_config(dir: &Path, engine: &FakeEngine, flag: &str) -> String {
    let path = dir.join("agentguard.toml");
    std::fs::write(
        &path,
        format!(
            r#"image = "localhost/tools:latest"
engine = "{}"

[commands.lint]
argv = ["printf", "[%s]\n", "{flag}", "--rounds={{rounds}}", "{{word}}"]

[commands.lint.params.rounds]
type = "integer"
min = 1
max = 9

[commands.lint.params.word]
type = "string"
pattern = "[a-z ]+"

[audit]
path = "audit.jsonl"
"#,
            engine.path().display()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn runs(dir: &Path) -> Vec<Value> {
    let log = dir.join("audit.jsonl");
    let verify = agentguard(&["audit", "verify", log.to_str().unwrap()]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "container_run")
        .collect()
}

fn sha256_of(path: &str) -> String {
    let digest = Sha256::digest(std::fs::read(path).unwrap());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_run_records_the_image_id_argv_config_digest_invoker_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = write_config(dir.path(), &engine, "--level=error");
    let first_digest = sha256_of(&cfg);
    let out = agentguard(&["run", "--config", &cfg, "lint", "rounds=7", "word=a b"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The run named the image by the ID the engine gave, never by the tag.
    let call = engine
        .calls()
        .into_iter()
        .find(|c| c.starts_with("run "))
        .expect("a run call");
    assert!(
        call.contains(&format!("--entrypoint /run/agentguard/relay {FAKE_ID} ")),
        "{call}"
    );
    assert!(!call.contains("localhost/tools:latest"), "{call}");

    // A refusal is recorded with who and which config, but nothing ran: no argv, no image.
    let out = agentguard(&["run", "--config", &cfg, "lint", "rounds=70", "word=x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // The config changes; the next event says so.
    let cfg = write_config(dir.path(), &engine, "--level=warning");
    let out = agentguard(&["run", "--config", &cfg, "lint", "rounds=1", "word=x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let runs = runs(dir.path());
    assert_eq!(runs.len(), 3, "{runs:#?}");
    let data = &runs[0]["data"];
    assert_eq!(
        data["argv"],
        json!(["printf", "[%s]\n", "--level=error", "--rounds=7", "a b"])
    );
    assert_eq!(data["image_id"], FAKE_ID);
    assert_eq!(data["config_sha256"], first_digest.as_str());
    assert_eq!(data["agentguard_version"], env!("CARGO_PKG_VERSION"));
    let invoker = &data["invoker"];
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uid: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(invoker["uid"], uid, "{invoker}");
    assert!(invoker["pid"].as_u64().is_some_and(|p| p > 0), "{invoker}");
    assert_ne!(
        invoker["pid"],
        u64::from(std::process::id()),
        "the agentguard process, not the test"
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(invoker["host"], host.trim(), "{invoker}");
    assert!(invoker.get("client").is_none(), "a CLI run has no client");

    let refused = &runs[1]["data"];
    assert_eq!(runs[1]["reason"], "invalid_arguments");
    assert!(refused.get("argv").is_none() && refused.get("image_id").is_none());
    assert_eq!(refused["config_sha256"], first_digest.as_str());
    assert_eq!(refused["invoker"]["uid"], uid);

    let after = &runs[2]["data"];
    assert_eq!(after["config_sha256"], sha256_of(&cfg).as_str());
    assert_ne!(after["config_sha256"], data["config_sha256"]);
    assert_eq!(after["argv"][2], "--level=warning");
}

//! Typed params against the binary with the fake engine: an accepted value is exactly one
//! argv element of what the engine is given, a refused one exits 2 before the engine is ever
//! called and is audited, and the config's declarations are checked at load.

use std::path::Path;

use agentguard_test_support::FakeEngine;
use serde_json::Value;

use crate::{agentguard, stderr, stdout};

/// A workspace with `tests/test_api.py` and a link out of it, and a config with one command
/// per param type; `printf '[%s]'` shows where one argv element begins and ends.
fn config(dir: &Path, engine: &FakeEngine) -> String {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("tests")).unwrap();
    std::fs::write(ws.join("tests/test_api.py"), "def test_ok():\n    pass\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.join("tests/passwd.py")).unwrap();
    let path = dir.join("agentguard.toml");
    std::fs::write(
        &path,
        format!(
            r#"image = "localhost/tools:latest"
engine = "{}"
workspace = "ws"

[audit]
path = "audit.jsonl"

[commands.test_file]
argv = ["printf", "[%s]\n", "-q", "{{path}}"]

[commands.test_file.params.path]
type = "path"
under = "tests"
kind = "file"
must_exist = true

[commands.lint]
argv = ["printf", "[%s]\n", "--level={{level}}", "--rounds={{rounds}}", "{{word}}"]

[commands.lint.params.level]
type = "enum"
values = ["error", "warning"]
default = "error"

[commands.lint.params.rounds]
type = "integer"
min = 1
max = 50

[commands.lint.params.word]
type = "string"
pattern = "[A-Za-z0-9_ ;$]+"

[commands.plain]
argv = ["true"]
"#,
            engine.path().display()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn audit(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn accepted_values_are_exactly_one_argv_element_each() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine);
    let out = agentguard(&[
        "run",
        "--config",
        &cfg,
        "test_file",
        "path=tests/test_api.py",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "[-q]\n[/workspace/tests/test_api.py]\n");
    let out = agentguard(&[
        "run",
        "--config",
        &cfg,
        "lint",
        "rounds=7",
        "word=a b; $HOME",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        result["stdout"], "[--level=error]\n[--rounds=7]\n[a b; $HOME]\n",
        "the default applies; a value with spaces and `;` stays one element, never a shell's"
    );
    assert_eq!(
        result["params"],
        serde_json::json!({"level": "error", "rounds": 7, "word": "a b; $HOME"})
    );
    let dry = agentguard(&[
        "run",
        "--config",
        &cfg,
        "lint",
        "rounds=3",
        "word=x",
        "--dry-run",
    ]);
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains(
            "--entrypoint /run/agentguard/relay localhost/tools:latest --receipt 65534:65534 -- printf '[%s]\n' --level=error --rounds=3 x"
        ),
        "{}",
        stdout(&dry)
    );
    let runs: Vec<Value> = audit(dir.path())
        .into_iter()
        .filter(|e| e["kind"] == "container_run")
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        runs[0]["data"]["params"],
        serde_json::json!({"path": "tests/test_api.py"})
    );
}

#[test]
fn a_refused_value_exits_2_names_the_rule_is_audited_and_never_calls_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine);
    for (args, rule) in [
        (&["test_file", "path=../etc/passwd"][..], "traversal"),
        (&["test_file", "path=tests/passwd.py"], "symlink"),
        (&["test_file", "path=tests/missing.py"], "not_found"),
        (&["test_file", "path=tests"], "wrong_kind"),
        (&["test_file"], "missing"),
        (
            &["test_file", "path=tests/test_api.py", "other=1"],
            "unknown",
        ),
        (&["lint", "rounds=03", "word=x"], "leading_zero"),
        (&["lint", "rounds=3", "word=--output=x"], "option"),
        (
            &["lint", "rounds=3", "word=x", "level=Error"],
            "not_in_enum",
        ),
        (&["plain", "x=1"], "unknown"),
    ] {
        let mut argv = vec!["run", "--config", &cfg];
        argv.extend_from_slice(args);
        let out = agentguard(&argv);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("invalid_arguments") && err.contains(&format!("(rule {rule};")),
            "{args:?}: {err}"
        );
    }
    assert!(
        engine.calls().is_empty(),
        "the engine was called: {:?}",
        engine.calls()
    );
    let events = audit(dir.path());
    assert_eq!(events.len(), 10, "{events:?}");
    for event in &events {
        assert_eq!(
            (&event["kind"], &event["decision"], &event["reason"]),
            (
                &"container_run".into(),
                &"deny".into(),
                &"invalid_arguments".into()
            ),
            "{event}"
        );
        assert!(event["data"]["message"].as_str().unwrap().contains("param"));
    }
    let not_words = agentguard(&["run", "--config", &cfg, "lint", "rounds"]);
    assert_eq!(not_words.status.code(), Some(2));
    assert!(
        stderr(&not_words).contains("is not P=VALUE"),
        "{}",
        stderr(&not_words)
    );
}

#[test]
fn a_value_that_is_not_utf8_is_refused_by_its_rule() {
    use std::os::unix::ffi::OsStrExt;

    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine);
    let bad = std::ffi::OsStr::from_bytes(b"word=\xc0\xae\xc0\xae");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["run", "--config", &cfg, "lint", "rounds=1"])
        .arg(bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("(rule not_utf8;"), "{}", stderr(&out));
    assert!(engine.calls().is_empty());
}

#[test]
fn declarations_are_checked_at_load_and_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    let cfg = config(dir.path(), &engine);
    let text = std::fs::read_to_string(&cfg).unwrap();
    for (from, to, needle) in [
        (
            "max = 50",
            "max = 50\nvalues = [\"a\"]",
            "a integer param has no `values`",
        ),
        (
            "\"{word}\"]",
            "\"{word}\", \"{other}\"]",
            "{other} names no declared param",
        ),
        (
            "pattern = \"[A-Za-z0-9_ ;$]+\"",
            "pattern = \"(\"",
            "params.word.pattern",
        ),
        (
            "default = \"error\"",
            "default = \"fatal\"",
            "params.level.default",
        ),
        (
            "type = \"path\"",
            "type = \"path\"\nfollow = true",
            "unknown field `follow`",
        ),
        ("workspace = \"ws\"\n", "", "no workspace is mounted"),
    ] {
        std::fs::write(&cfg, text.replace(from, to)).unwrap();
        let out = agentguard(&["run", "--config", &cfg, "plain", "--dry-run"]);
        assert_eq!(out.status.code(), Some(2), "{to}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(needle),
            "{needle:?} in {}",
            stderr(&out)
        );
    }
}

/// Issue 34, item 9: the largest value every type accepts runs and its event is in the
/// verified log (a long value cut, with its SHA-256). A value whose argv element the kernel
/// would refuse (E2BIG) cannot come through a command line; policy's tests refuse it.
#[test]
fn r34_9_the_largest_accepted_values_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let engine = FakeEngine::new();
    std::fs::create_dir_all(dir.path().join("ws")).unwrap();
    let long_enum = "e".repeat(3000);
    let cfg = dir.path().join("agentguard.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"image = "localhost/tools:latest"
engine = "{}"
workspace = "ws"

[audit]
path = "audit.jsonl"

[commands.big]
argv = ["true", "{{s}}", "--n={{n}}", "{{p}}", "{{e}}"]

[commands.big.params.s]
type = "string"
pattern = "[a-z€]+"
max_length = 65536

[commands.big.params.n]
type = "integer"
min = -9223372036854775808
max = 9223372036854775807

[commands.big.params.p]
type = "path"

[commands.big.params.e]
type = "enum"
values = ["{long_enum}"]
default = "{long_enum}"
"#,
            engine.path().display()
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let s = "a".repeat(65536);
    let component = "c".repeat(254);
    let mut p = std::iter::repeat_n(component.as_str(), 16)
        .collect::<Vec<_>>()
        .join("/");
    p.truncate(4096);
    let p = p.trim_end_matches('/').to_owned();
    let out = agentguard(&[
        "run",
        "--config",
        cfg,
        "big",
        &format!("s={s}"),
        "n=-9223372036854775808",
        &format!("p={p}"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let verify = agentguard(&[
        "audit",
        "verify",
        dir.path().join("audit.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    let runs: Vec<Value> = audit(dir.path())
        .into_iter()
        .filter(|e| e["kind"] == "container_run")
        .collect();
    assert_eq!(runs.len(), 1, "the run's event was written");
    let params = &runs[0]["data"]["params"];
    let recorded = params["s"].as_str().unwrap();
    let digest = {
        use sha2::Digest as _;
        sha2::Sha256::digest(s.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert!(
        recorded.starts_with(&"a".repeat(256))
            && recorded.ends_with(&format!("…[cut: 65536 bytes, sha256 {digest}]")),
        "{recorded}"
    );
    assert_eq!(params["n"], i64::MIN);
    assert!(
        params["p"].as_str().unwrap().contains("…[cut: "),
        "{params}"
    );
    assert!(
        params["e"].as_str().unwrap().contains("…[cut: 3000 bytes"),
        "{params}"
    );
}

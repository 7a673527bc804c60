//! Typed params on real engines: an agent calls the parameterized `test_file` over MCP with
//! the Python SDK and gets that one file's pytest result from a hardened container, and a
//! traversal comes back `invalid_arguments` with nothing started; a symlink made after the
//! host check is followed inside the container, where it reaches only the container's files.

use std::time::Duration;

use agentguard_e2e::Folder;
use agentguard_policy::{Arg, ParamSpec};
use anyhow::{Result, ensure};
use serde_json::{Value, json};

use crate::combo_or_skip;
use crate::egress::World;
use crate::mcp::client_with;

#[tokio::test(flavor = "multi_thread")]
async fn a_parameterized_tool_runs_one_test_file_and_refuses_a_traversal_over_mcp() -> Result<()> {
    let combo =
        combo_or_skip!("a_parameterized_tool_runs_one_test_file_and_refuses_a_traversal_over_mcp");
    let world = World::start(combo.clone(), "mcp-params").await?;
    std::fs::create_dir_all(world.dir.join("tests"))?;
    std::fs::write(
        world.dir.join("tests/test_api.py"),
        "def test_api():\n    assert 1 + 1 == 2\n",
    )?;
    std::fs::write(
        world.dir.join("tests/test_other.py"),
        "def test_other():\n    assert 1 + 1 == 3\n",
    )?;
    let config = world.config(
        &combo.pytest_image,
        "timeout = 120\n\n[commands.test_file]\nargv = [\"python3\", \"-m\", \"pytest\", \"-q\", \"-p\", \"no:cacheprovider\", \"{path}\"]\ndescription = \"Run one test file\"\nnetwork = \"none\"\n\n[commands.test_file.params.path]\ntype = \"path\"\ndescription = \"A test file under tests/\"\nunder = \"tests\"\nkind = \"file\"\nmust_exist = true\n",
    )?;
    let calls = json!([{"path": "tests/test_api.py"}, {"path": "tests/../../etc/passwd"}]);
    for mode in ["legacy", "2026-07-28"] {
        let seen = tokio::task::block_in_place(|| {
            client_with(&world, &config, mode, "test_file", Some(&calls))
        })?;
        ensure!(
            seen["schema"]["required"] == json!(["path"])
                && seen["schema"]["properties"]["path"]["type"] == "string",
            "{mode}: the schema from the params: {seen}"
        );
        let ran = &seen["calls"][0];
        let result = &ran["structured"];
        let stdout = result["stdout"].as_str().unwrap_or_default();
        println!(
            "{}: over MCP ({mode}), test_file path=tests/test_api.py: {}",
            combo.label(),
            stdout.lines().last().unwrap_or_default()
        );
        ensure!(
            ran["is_error"] == false
                && result["exit_code"] == 0
                && stdout.contains("1 passed")
                && !stdout.contains("failed"),
            "{mode}: only that file ran: {ran}"
        );
        let refused = &seen["calls"][1];
        ensure!(
            refused["is_error"] == true
                && refused["structured"]["reason"] == "invalid_arguments"
                && refused["structured"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("param path") && m.contains("(rule traversal;")),
            "{mode}: {refused}"
        );
    }
    let audit = world.audit()?;
    let runs: Vec<&Value> = audit
        .iter()
        .filter(|e| e["kind"] == "container_run")
        .collect();
    ensure!(runs.len() == 4, "a container_run per call: {runs:?}");
    let (allowed, denied): (Vec<&Value>, Vec<&Value>) =
        runs.iter().partition(|e| e["decision"] == "allow");
    ensure!(
        allowed.len() == 2
            && allowed
                .iter()
                .all(|e| e["data"]["params"] == json!({"path": "tests/test_api.py"}))
            && denied
                .iter()
                .all(|e| e["reason"] == "invalid_arguments" && e["data"]["container"].is_null()),
        "{runs:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_link_made_after_the_check_reaches_only_the_containers_files() -> Result<()> {
    let combo = combo_or_skip!("a_link_made_after_the_check_reaches_only_the_containers_files");
    let ws = Folder::new(&combo.unique("params-race"), (65534, 65534))?;
    std::fs::create_dir_all(ws.join("tests"))?;
    std::fs::write(ws.join("tests/a.txt"), "checked\n")?;
    std::fs::write(ws.join("tests/b.txt"), "checked\n")?;
    // Beside the workspace on the host, never mounted.
    let secret = ws.0.with_extension("secret");
    std::fs::write(&secret, "HOST-SECRET\n")?;
    let path = ParamSpec {
        kind: "path".into(),
        under: Some("tests".into()),
        path_kind: Some("file".into()),
        must_exist: Some(true),
        ..ParamSpec::default()
    };
    let executor = combo.executor(
        combo
            .builder(&combo.probe_image)
            .workspace(&ws.0)
            .command_with_params(
                "show",
                vec![
                    "sh".into(),
                    "-c".into(),
                    "cat \"$0\"; echo status=$?".into(),
                    "{path}".into(),
                ],
                [("path".to_owned(), path)].into(),
            )
            .timeout(Duration::from_secs(60))
            .build()?,
    )?;
    let word = |p: &str| vec![("path".to_owned(), Arg::Word(p.to_owned()))];
    // Both pass the host check as plain files; then each becomes a link out of the workspace.
    let absolute = executor.invoke("show", &word("tests/a.txt"))?;
    let upward = executor.invoke("show", &word("tests/b.txt"))?;
    std::fs::remove_file(ws.join("tests/a.txt"))?;
    std::os::unix::fs::symlink(&secret, ws.join("tests/a.txt"))?;
    std::fs::remove_file(ws.join("tests/b.txt"))?;
    std::os::unix::fs::symlink("../../../../../../../../etc/passwd", ws.join("tests/b.txt"))?;
    let through_absolute = executor.run(&absolute).await?;
    let through_upward = executor.run(&upward).await?;
    let out = |r: &agentguard_container::RunResult| String::from_utf8_lossy(&r.stdout).into_owned();
    println!(
        "{}: a link to a host file, made after the check: {:?}; a link up to /etc/passwd: {} lines of the image's file",
        combo.label(),
        out(&through_absolute).trim(),
        out(&through_upward).lines().count()
    );
    ensure!(
        !out(&through_absolute).contains("HOST-SECRET")
            && out(&through_absolute).contains("status=1"),
        "the host file is not in the container: {}",
        out(&through_absolute)
    );
    // The probe image's /etc/passwd has root and nobody only; Debian's has `daemon` too.
    let upward_text = out(&through_upward);
    ensure!(
        upward_text.contains("nobody:x:65534") && !upward_text.contains("daemon:"),
        "the link resolved in the container's root, not the host's: {upward_text}"
    );
    let _ = std::fs::remove_file(&secret);
    Ok(())
}

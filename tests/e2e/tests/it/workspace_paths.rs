//! Issue 35 on real engines, through the binary: a command with `workspace_mode = "rw"`
//! writes while one beside it cannot; `writable = ["build"]` lets a read-only command write
//! only there; `hidden` makes `.env`, `a/b/.env.local`, `key.pem` and `secrets/` read as
//! empty, and a link named `.env` shows nothing of its target; the tools are annotated with
//! each command's own workspace and list a glob's matches; a value outside the glob is refused.

use std::process::Command;

use agentguard_e2e::{Combo, Folder};
use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::combo_or_skip;

const MARKER: &str = "SECRET-MARKER-35";

/// Writes `config` beside the workspace and runs `args` with it: (exit code, `--json` result).
fn run(
    combo: &Combo,
    config: &std::path::Path,
    args: &[&str],
) -> Result<(Option<i32>, Value, String)> {
    let out = Command::new(&combo.binary)
        .args(["run", "--config"])
        .arg(config)
        .args(args)
        .output()
        .context("running agentguard")?;
    let json = serde_json::from_slice(&out.stdout).unwrap_or_default();
    Ok((
        out.status.code(),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn config(combo: &Combo, ws: &Folder, name: &str, body: &str) -> Result<std::path::PathBuf> {
    let path = ws.0.with_extension(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "image = \"{}\"\nengine = \"{}\"\n{}workspace = \"{}\"\ntimeout = 120\n{body}",
            combo.probe_image,
            combo.program(),
            combo.runtime_line(),
            ws.0.display()
        ),
    )?;
    Ok(path)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rw_command_writes_and_the_one_beside_it_cannot() -> Result<()> {
    let combo = combo_or_skip!("a_rw_command_writes_and_the_one_beside_it_cannot");
    let ws = Folder::new(&combo.unique("rw-beside"), (1234, 2345))?;
    let cfg = config(
        &combo,
        &ws,
        "rw",
        "[commands.install]\nargv = [\"sh\", \"-c\", \"echo rw > /workspace/rw_out && echo wrote\"]\nworkspace_mode = \"rw\"\n\n[commands.look]\nargv = [\"sh\", \"-c\", \"echo ro > /workspace/ro_out 2>/dev/null && echo wrote || echo refused\"]\n",
    )?;
    let (code, json, stderr) =
        tokio::task::block_in_place(|| run(&combo, &cfg, &["install", "--json"]))?;
    ensure!(
        code == Some(0) && json["stdout"] == "wrote\n",
        "install: {json} {stderr}"
    );
    let (code, json, stderr) =
        tokio::task::block_in_place(|| run(&combo, &cfg, &["look", "--json"]))?;
    ensure!(
        code == Some(0) && json["stdout"] == "refused\n",
        "look: {json} {stderr}"
    );
    ensure!(
        ws.join("rw_out").exists() && !ws.join("ro_out").exists(),
        "the host sees only install's file"
    );
    println!(
        "{}: rw beside ro: install wrote, look was refused",
        combo.label()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn writable_paths_and_hidden_paths_from_inside() -> Result<()> {
    let combo = combo_or_skip!("writable_paths_and_hidden_paths_from_inside");
    let ws = Folder::new(&combo.unique("paths"), (1234, 2345))?;
    for folder in ["build", "a/b", "secrets", "src", "tests"] {
        std::fs::create_dir_all(ws.join(folder))?;
    }
    std::os::unix::fs::chown(ws.join("build"), Some(1234), Some(2345))?;
    for file in [".env", "a/b/.env.local", "key.pem", "secrets/token"] {
        std::fs::write(ws.join(file), MARKER)?;
    }
    std::fs::write(ws.join("notes.txt"), "LINKED-CONTENT")?;
    std::os::unix::fs::symlink("../notes.txt", ws.join("src/.env"))?;
    std::fs::write(ws.join("tests/test_a.py"), "")?;
    std::fs::write(ws.join("tests/helper.py"), "")?;
    let script = "echo b > /workspace/build/out && echo build_ok; \
        (echo x > /workspace/other) 2>/dev/null && echo other_written || echo other_refused; \
        cat /workspace/.env /workspace/a/b/.env.local /workspace/key.pem /workspace/src/.env; \
        echo; echo secrets=$(ls -A /workspace/secrets | wc -l)";
    let cfg = config(
        &combo,
        &ws,
        "paths",
        &format!(
            "hidden = [\".env\", \"**/.env*\", \"**/*.pem\", \"secrets/\"]\n\n[commands.build]\nargv = [\"sh\", \"-c\", {script:?}]\nwritable = [\"build\"]\n\n[commands.test_file]\nargv = [\"cat\", \"{{path}}\"]\n[commands.test_file.params.path]\ntype = \"path\"\nglob = \"tests/test_*.py\"\n"
        ),
    )?;
    let (code, json, stderr) =
        tokio::task::block_in_place(|| run(&combo, &cfg, &["build", "--json"]))?;
    let said = json["stdout"].as_str().unwrap_or_default().to_owned();
    ensure!(code == Some(0), "build: {json} {stderr}");
    for want in ["build_ok", "other_refused", "secrets=0"] {
        ensure!(
            said.contains(want),
            "{}: {want:?} missing from {said:?}",
            combo.label()
        );
    }
    ensure!(
        !said.contains(MARKER) && !said.contains("LINKED-CONTENT"),
        "{}: a hidden file was read: {said:?}",
        combo.label()
    );
    ensure!(
        std::fs::read_to_string(ws.join("build/out"))? == "b\n",
        "build/out on the host"
    );
    ensure!(!ws.join("other").exists(), "nothing written beside build");
    // The tools: the build tool writes; test_file lists exactly its glob's match.
    let tools = Command::new(&combo.binary)
        .args(["tools", "--format", "mcp", "--config"])
        .arg(&cfg)
        .output()?;
    let tools: Value = serde_json::from_slice(&tools.stdout)?;
    let tool = |name: &str| {
        tools["tools"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["name"] == name).cloned())
            .unwrap_or_default()
    };
    ensure!(
        tool("build")["annotations"]["destructiveHint"] == true,
        "{tools}"
    );
    ensure!(
        tool("test_file")["annotations"]["readOnlyHint"] == true,
        "{tools}"
    );
    ensure!(
        tool("test_file")["inputSchema"]["properties"]["path"]["enum"]
            == serde_json::json!(["tests/test_a.py"]),
        "{tools}"
    );
    let (code, _, stderr) =
        tokio::task::block_in_place(|| run(&combo, &cfg, &["test_file", "path=tests/helper.py"]))?;
    ensure!(
        code == Some(2) && stderr.contains("not_matched"),
        "{code:?} {stderr}"
    );
    println!(
        "{}: writable build written, the rest refused; .env, a/b/.env.local, key.pem, secrets/ and a linked .env read empty",
        combo.label()
    );
    Ok(())
}

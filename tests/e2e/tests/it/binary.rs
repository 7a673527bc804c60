//! Through the `agentguard` binary, as a user runs it: the pytest example, SIGTERM and
//! SIGKILL of a run, `gc`, `doctor`'s trivial hardened run, and image pins.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentguard_e2e::{Combo, Folder, output, stdout_text};
use anyhow::{Context, Result, bail, ensure};

use crate::combo_or_skip;

/// A folder with an `agentguard.toml` for the probe image and `sleepy` and `noop` commands.
fn crash_config(combo: &Combo, dir: &Folder, name: &str, image: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "image = \"{image}\"\nengine = \"{}\"\n{}timeout = 120\n\n[commands]\nsleepy = [\"sleep\", \"60\"]\nnoop = [\"true\"]\n",
            combo.program(),
            combo.runtime_line()
        ),
    )?;
    Ok(path)
}

fn spawn_run(combo: &Combo, config: &PathBuf, name: &str) -> Result<Child> {
    Ok(Command::new(&combo.binary)
        .args(["run", "--config"])
        .arg(config)
        .arg(name)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?)
}

/// Waits (bounded) until a container owned by `pid` exists; returns its ID.
fn wait_for_container(combo: &Combo, pid: u32) -> Result<String> {
    for _ in 0..200 {
        let id = combo.containers_of(pid)?;
        if !id.is_empty() {
            return Ok(id);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("no container owned by pid {pid} appeared within 20 s")
}

fn container_exists(combo: &Combo, id: &str) -> Result<bool> {
    combo.container_exists(id)
}

#[test]
fn the_pytest_example_reports_one_failed_one_passed_as_a_result() -> Result<()> {
    let combo = combo_or_skip!("the_pytest_example_reports_one_failed_one_passed_as_a_result");
    let dir = Folder::new(&combo.unique("pytest"), (0, 0))?;
    std::fs::create_dir_all(dir.join("workspace"))?;
    std::fs::write(
        dir.join("workspace/test_example.py"),
        "def test_passes():\n    assert 1 + 1 == 2\n\n\ndef test_fails():\n    assert 1 + 1 == 3\n",
    )?;
    std::fs::write(
        dir.join("agentguard.toml"),
        format!(
            "image = \"{}\"\nengine = \"{}\"\n{}workspace = \"workspace\"\ntimeout = 120\ncheck = false\n\n[environment]\nCI = \"1\"\n\n[commands]\nrun_tests = [\"python3\", \"-m\", \"pytest\", \"-q\", \"-p\", \"no:cacheprovider\"]\n\n[audit]\npath = \"audit.jsonl\"\n",
            combo.pytest_image,
            combo.program(),
            combo.runtime_line()
        ),
    )?;
    let out = Command::new(&combo.binary)
        .args(["run", "--config"])
        .arg(dir.join("agentguard.toml"))
        .args(["run_tests", "--json"])
        .output()
        .context("running agentguard run")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_default();
    let stdout = value["stdout"].as_str().unwrap_or_default();
    let audited = Command::new(&combo.binary)
        .args(["audit", "verify"])
        .arg(dir.join("audit.jsonl"))
        .output()?;
    println!(
        "{}: pytest in the container said: {}",
        combo.label(),
        stdout.lines().last().unwrap_or_default()
    );
    ensure!(
        out.status.code() == Some(1)
            && value["status"] == "exited"
            && value["exit_code"] == 1
            && stdout.contains("1 failed, 1 passed")
            && audited.status.success(),
        "exit {:?}, json {text}, stderr {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn sigterm_of_agentguard_run_kills_and_removes_its_container() -> Result<()> {
    let combo = combo_or_skip!("sigterm_of_agentguard_run_kills_and_removes_its_container");
    let dir = Folder::new(&combo.unique("sigterm"), (0, 0))?;
    let config = crash_config(&combo, &dir, "agentguard.toml", &combo.probe_image)?;
    let mut child = spawn_run(&combo, &config, "sleepy")?;
    let id = wait_for_container(&combo, child.id())?;
    output("kill", &["-TERM", &child.id().to_string()])?;
    let status = child.wait()?;
    let gone = !container_exists(&combo, &id)?;
    ensure!(
        status.code() == Some(143) && gone,
        "exit {status}, container gone: {gone}"
    );
    Ok(())
}

#[test]
fn after_a_sigkill_the_container_survives_and_gc_removes_it() -> Result<()> {
    let combo = combo_or_skip!("after_a_sigkill_the_container_survives_and_gc_removes_it");
    let dir = Folder::new(&combo.unique("sigkill"), (0, 0))?;
    let config = crash_config(&combo, &dir, "agentguard.toml", &combo.probe_image)?;
    let mut child = spawn_run(&combo, &config, "sleepy")?;
    let id = wait_for_container(&combo, child.id())?;
    child.kill()?;
    child.wait()?;
    let survived = container_exists(&combo, &id)?;
    let gc = Command::new(&combo.binary).arg("gc").output()?;
    let removed = !container_exists(&combo, &id)?;
    ensure!(
        survived && removed && gc.status.success(),
        "survived: {survived}, removed: {removed}, gc said: {}",
        String::from_utf8_lossy(&gc.stdout).trim()
    );
    Ok(())
}

#[test]
fn doctors_trivial_hardened_run_of_the_configured_image_succeeds() -> Result<()> {
    let combo = combo_or_skip!("doctors_trivial_hardened_run_of_the_configured_image_succeeds");
    let dir = Folder::new(&combo.unique("doctor"), (0, 0))?;
    let config = crash_config(&combo, &dir, "agentguard.toml", &combo.probe_image)?;
    let doctor = Command::new(&combo.binary)
        .arg("doctor")
        .env("AGENTGUARD_CONFIG", &config)
        .output()?;
    let said = String::from_utf8_lossy(&doctor.stdout).into_owned();
    ensure!(
        said.lines()
            .any(|l| l.starts_with("OK") && l.contains("a trivial hardened run of")),
        "{said}"
    );
    Ok(())
}

/// Issue 38: `doctor --config` looks each command's program up inside the image, as its user
/// with no network: one that is there is OK with its path, one that is not FAILs by name.
#[test]
fn doctor_config_fails_a_program_the_image_lacks() -> Result<()> {
    let combo = combo_or_skip!("doctor_config_fails_a_program_the_image_lacks");
    let dir = Folder::new(&combo.unique("doctor-config"), (0, 0))?;
    let config = dir.join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"{}\"\nengine = \"{}\"\n{}\n[commands]\nnoop = [\"true\"]\nghost = [\"agentguard-no-such-program\", \"--help\"]\n",
            combo.probe_image,
            combo.program(),
            combo.runtime_line()
        ),
    )?;
    let doctor = Command::new(&combo.binary)
        .arg("doctor")
        .arg("--config")
        .arg(&config)
        .env_remove("AGENTGUARD_CONFIG")
        .output()?;
    let said = String::from_utf8_lossy(&doctor.stdout).into_owned();
    ensure!(doctor.status.code() == Some(1), "{said}");
    ensure!(
        said.lines().any(|l| l.starts_with("OK")
            && l.contains("command noop: its program true is /")
            && l.contains("executable by uid 65534")),
        "{said}"
    );
    ensure!(
        said.lines().any(|l| l.starts_with("FAIL")
            && l.contains("command ghost: its program agentguard-no-such-program is not in image")),
        "{said}"
    );
    Ok(())
}

#[test]
fn an_image_pinned_by_id_runs_and_a_wrong_id_is_an_engine_error() -> Result<()> {
    let combo = combo_or_skip!("an_image_pinned_by_id_runs_and_a_wrong_id_is_an_engine_error");
    let dir = Folder::new(&combo.unique("pins"), (0, 0))?;
    let image_id = stdout_text(&output(
        combo.store(),
        &[
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            &combo.probe_image,
        ],
    )?);
    let pinned = format!("sha256:{}", image_id.trim_start_matches("sha256:"));
    let pinned = crash_config(&combo, &dir, "pinned.toml", &pinned)?;
    let wrong = format!("sha256:{}", "0".repeat(64));
    let wrong = crash_config(&combo, &dir, "wrong.toml", &wrong)?;
    let run = |config: &PathBuf| {
        Command::new(&combo.binary)
            .args(["run", "--config"])
            .arg(config)
            .arg("noop")
            .output()
    };
    let (ok, refused) = (run(&pinned)?, run(&wrong)?);
    ensure!(
        ok.status.success() && refused.status.code() == Some(125),
        "pinned: {} {}; wrong: {} {}",
        ok.status,
        String::from_utf8_lossy(&ok.stderr).trim(),
        refused.status,
        String::from_utf8_lossy(&refused.stderr).trim()
    );
    Ok(())
}

/// Issue 37: a run by tag records the ID of the image the engine ran, the one `image
/// inspect` gives, and the exact argv.
#[test]
fn the_recorded_image_id_is_the_engines() -> Result<()> {
    let combo = combo_or_skip!("the_recorded_image_id_is_the_engines");
    let dir = Folder::new(&combo.unique("image-id"), (0, 0))?;
    let config = crash_config(&combo, &dir, "agentguard.toml", &combo.probe_image)?;
    let mut text = std::fs::read_to_string(&config)?;
    text.push_str("\n[audit]\npath = \"audit.jsonl\"\n");
    std::fs::write(&config, text)?;
    let run = Command::new(&combo.binary)
        .args(["run", "--config"])
        .arg(&config)
        .arg("noop")
        .output()?;
    ensure!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let inspected = stdout_text(&output(
        combo.store(),
        &[
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            &combo.probe_image,
        ],
    )?);
    let want = format!("sha256:{}", inspected.trim().trim_start_matches("sha256:"));
    let log = std::fs::read_to_string(dir.join("audit.jsonl"))?;
    let event: serde_json::Value = log
        .lines()
        .map(serde_json::from_str::<serde_json::Value>)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .find(|e| e["kind"] == "container_run")
        .context("no container_run event")?;
    ensure!(
        event["data"]["image_id"] == want.as_str(),
        "{event}; want {want}"
    );
    ensure!(
        event["data"]["argv"] == serde_json::json!(["true"]),
        "{event}"
    );
    Ok(())
}

//! The learn loop with real pip in real containers (issue 36): a package index whose page
//! links its files on a second host name. The plain run fails and names that host; the
//! observe run installs and records it as `observed`; `policy suggest` proposes exactly that
//! host; the config after `--write` installs without `--observe`. A name resolving to
//! 10.0.0.1 stays refused under `--observe` (never dialed) and is never suggested.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Command, Output};

use agentguard_e2e::{Combo, Folder};
use agentguard_test_support::index::{WHEEL_NAME, WHEEL_SCRIPT, index_files_at};
use agentguard_test_support::{FakeDns, TestCa, TlsUpstream, free_port};
use anyhow::{Context, Result, ensure};

use crate::combo_or_skip;

const UPSTREAM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const INDEX: &str = "pkgs.example.test";
const FILES: &str = "files.example.test";
const PRIVATE: &str = "private.example.test";

fn agentguard(combo: &Combo, args: &[&str]) -> Result<Output> {
    tokio::task::block_in_place(|| {
        Command::new(&combo.binary)
            .args(args)
            .output()
            .context("running agentguard")
    })
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap_or_default()
}

fn said(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The config: pip from the index (files on the second name), and a reach for the private one.
fn config(combo: &Combo, dir: &Folder, dns: &FakeDns, port: u16, audit: &Path) -> String {
    let pip = format!(
        "[\"python3\", \"-m\", \"pip\", \"install\", \"--no-cache-dir\", \"--disable-pip-version-check\", \"--retries\", \"0\", \"--timeout\", \"20\", \"--target\", \"/workspace/.deps\", \"--index-url\", \"https://{INDEX}:{port}/simple/\", \"--cert\", \"/workspace/ca.pem\", \"agprobe\"]"
    );
    let reach = format!(
        "import os, urllib.request\\ntry:\\n    urllib.request.urlopen('https://{PRIVATE}:{port}/', timeout=20)\\nexcept Exception as e:\\n    print('refused:', e)"
    );
    format!(
        "# The learn loop's config: policy suggest --write keeps this comment.\nimage = \"{image}\"\nengine = \"{engine}\"\n{runtime}workspace = \"{workspace}\"\nnetwork = \"egress\"\nworkspace_mode = \"rw\"\ntimeout = 180\n\n[commands.install]\nargv = {pip}\n\n[commands.reach_private]\nargv = [\"python3\", \"-c\", \"{reach}\"]\n\n[egress]\nallow = [\"{INDEX}\"]\nallow_ports = [{port}]\nallow_cidrs = [\"127.0.0.2/32\"]\nnameservers = [\"{dns}\"]\n\n[audit]\npath = \"{audit}\"\n",
        image = combo.pytest_image,
        engine = combo.program(),
        runtime = combo.runtime_line(),
        workspace = dir.0.display(),
        dns = dns.addr(),
        audit = audit.display(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn observe_then_suggest_then_write_lets_pip_install_from_a_second_host() -> Result<()> {
    let combo =
        combo_or_skip!("observe_then_suggest_then_write_lets_pip_install_from_a_second_host");
    let ca = TestCa::new("agentguard e2e learn CA");
    let dir = Folder::new(&combo.unique("learn"), (65534, 65534))?;
    let wheel = dir.join(WHEEL_NAME);
    let status = Command::new("python3")
        .args(["-c", WHEEL_SCRIPT])
        .arg(&wheel)
        .status()?;
    ensure!(status.success(), "building the wheel: {status}");
    let port = free_port();
    let files = index_files_at(std::fs::read(&wheel)?, &format!("https://{FILES}:{port}"));
    let upstream =
        TlsUpstream::start_with_files(UPSTREAM, port, ca.server_config(&[INDEX, FILES]), files)
            .await?;
    let dns = FakeDns::start().await;
    dns.answer(INDEX, &[UPSTREAM]);
    dns.answer(FILES, &[UPSTREAM]);
    // Not public and not in allow_cidrs: refused by every run, observe included.
    dns.answer(PRIVATE, &[IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))]);
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    let path = dir.0.with_extension("toml");
    let audit = dir.0.with_extension("audit.jsonl");
    std::fs::write(&path, config(&combo, &dir, &dns, port, &audit))?;
    let config = path.to_str().context("utf-8 path")?;
    let log = audit.to_str().context("utf-8 path")?;
    let files_target = format!("{FILES}:{port}");
    let result = async {
        // 1. The plain run fails, and its result names the host and why.
        let out = agentguard(&combo, &["run", "--config", config, "install", "--json"])?;
        let value = json(&out);
        ensure!(
            out.status.code() != Some(0)
                && value["egress"]["refused"][0]["target"] == files_target.as_str()
                && value["egress"]["refused"][0]["reason"] == "domain_not_allowed",
            "the plain run: {}",
            said(&out)
        );
        // 2. The observe run installs, and records the second host as observed.
        let _ = std::fs::remove_dir_all(dir.join(".deps"));
        let out = agentguard(&combo, &["run", "--config", config, "--observe", "install", "--json"])?;
        let value = json(&out);
        ensure!(
            out.status.code() == Some(0)
                && value["egress"]["observed"] == 1
                && value["egress"]["observed_targets"][0]["target"] == files_target.as_str()
                && String::from_utf8_lossy(&out.stderr).contains("observe: THE POLICY IS NOT ENFORCED"),
            "the observe run: {}",
            said(&out)
        );
        // 3. A private address stays refused under observe.
        let out = agentguard(&combo, &["run", "--config", config, "--observe", "reach_private", "--json"])?;
        let value = json(&out);
        ensure!(
            value["egress"]["refused"][0]["reason"] == "non_public_address"
                && value["egress"].get("observed").is_none(),
            "the private name under observe: {}",
            said(&out)
        );
        // 4. The suggestion: exactly the second host, the private name never.
        let out = agentguard(&combo, &["policy", "suggest", log, "--config", config, "--format", "json"])?;
        let value = json(&out);
        ensure!(
            value["changes"]
                == serde_json::json!([{"table": "commands.install", "key": "egress_allow",
                    "value": [INDEX, FILES], "added": value["changes"][0]["added"]}])
                && value["changes"][0]["added"][0]["value"] == FILES
                && value["never_suggested"][0]["target"] == format!("{PRIVATE}:{port}").as_str(),
            "policy suggest: {}",
            said(&out)
        );
        // 5. Written, the config installs without --observe and refuses nothing.
        let out = agentguard(&combo, &["policy", "suggest", log, "--config", config, "--write"])?;
        ensure!(out.status.code() == Some(0), "--write: {}", said(&out));
        let _ = std::fs::remove_dir_all(dir.join(".deps"));
        let out = agentguard(&combo, &["run", "--config", config, "install", "--json"])?;
        let value = json(&out);
        ensure!(
            out.status.code() == Some(0)
                && value["egress"]["denied"] == 0
                && value["egress"]["allowed"] == 2,
            "the run after --write: {}",
            said(&out)
        );
        println!(
            "{}: pip failed, observed {files_target}, suggest proposed it, and the written config installed",
            combo.label()
        );
        anyhow::Ok(())
    }
    .await;
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&audit);
    drop(upstream);
    result
}

//! `network = "egress"` from inside real containers: through the relay and the run's own
//! proxy an allowlisted HTTPS host (a TLS upstream on the host's 127.0.0.2, allowed by
//! `allow_cidrs`) answers with the test CA trusted, an off-list host gets 403, and nothing
//! else works: no interface but `lo`, no route but loopback ones, the host's upstream and DNS
//! server unreachable. The pip example installs through the proxy and pytest imports the
//! package offline. Timeout, flood, SIGTERM and SIGKILL leave nothing behind (after `gc`).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agentguard_e2e::{Combo, Folder, output, stdout_text, workspace_root};
use agentguard_test_support::index::{WHEEL_NAME, WHEEL_SCRIPT, index_files};
use agentguard_test_support::{FakeDns, TestCa, TlsUpstream};
use anyhow::{Context, Result, bail, ensure};

use crate::combo_or_skip;

/// The egress probe, run with python3 in the pytest image.
const EGRESS_PROBE: &str = include_str!("../../egress_probe.py");
const UPSTREAM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
pub(crate) const ALLOWED: &str = "pkgs.example.test";
const OFFLIST: &str = "evil.example.test";

/// A key the probe prints, a judge of its value, and what is wanted.
type Check = (&'static str, Box<dyn Fn(&str) -> bool>, String);

/// The host side: DNS, the TLS upstream (with a package index), the workspace and config.
pub(crate) struct World {
    pub(crate) combo: Combo,
    dns: FakeDns,
    pub(crate) upstream: TlsUpstream,
    pub(crate) dir: Folder,
}

impl World {
    pub(crate) async fn start(combo: Combo, what: &str) -> Result<World> {
        let ca = TestCa::new("agentguard e2e CA");
        let dir = Folder::new(&combo.unique(what), (65534, 65534))?;
        let files = index_files(build_wheel(&dir.join(WHEEL_NAME))?);
        let upstream =
            TlsUpstream::start_with_files(UPSTREAM, 0, ca.server_config(&[ALLOWED]), files).await?;
        let dns = FakeDns::start().await;
        dns.answer(ALLOWED, &[UPSTREAM]);
        dns.answer(OFFLIST, &[UPSTREAM]);
        std::fs::write(dir.join("ca.pem"), ca.pem())?;
        std::fs::write(dir.join("egress_probe.py"), EGRESS_PROBE)?;
        Ok(World {
            combo,
            dns,
            upstream,
            dir,
        })
    }

    /// Writes `agentguard.toml` beside the workspace (the folder itself): `image`, `rest`
    /// (top-level keys first, then its tables), and the `[egress]` and `[audit]` tables.
    pub(crate) fn config(&self, image: &str, rest: &str) -> Result<PathBuf> {
        let path = self.dir.0.with_extension("toml");
        let port = self.upstream.addr().port();
        std::fs::write(
            &path,
            format!(
                "image = \"{image}\"\nengine = \"{}\"\n{}workspace = \"{}\"\nnetwork = \"egress\"\n{rest}\n\n[egress]\nallow = [\"{ALLOWED}\"]\nallow_ports = [{port}]\nallow_cidrs = [\"127.0.0.2/32\"]\nnameservers = [\"{}\"]\n\n[audit]\npath = \"{}\"\n",
                self.combo.program(),
                self.combo.runtime_line(),
                self.dir.0.display(),
                self.dns.addr(),
                self.audit_path().display(),
            ),
        )?;
        Ok(path)
    }

    fn audit_path(&self) -> PathBuf {
        self.dir.0.with_extension("audit.jsonl")
    }

    fn run(&self, config: &Path, name: &str) -> Result<Output> {
        Command::new(&self.combo.binary)
            .args(["run", "--config"])
            .arg(config)
            .args([name, "--json"])
            .output()
            .context("running agentguard run")
    }

    /// The audit log's records, after checking that it verifies.
    pub(crate) fn audit(&self) -> Result<Vec<serde_json::Value>> {
        let verify = Command::new(&self.combo.binary)
            .args(["audit", "verify"])
            .arg(self.audit_path())
            .output()?;
        ensure!(
            verify.status.success(),
            "the audit log does not verify: {}",
            String::from_utf8_lossy(&verify.stdout)
        );
        Ok(std::fs::read_to_string(self.audit_path())?
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.0.with_extension("toml"));
        let _ = std::fs::remove_file(self.audit_path());
    }
}

/// The test wheel (`agprobe`, `VALUE = 42`), built with the host's python3 zipfile.
fn build_wheel(path: &Path) -> Result<Vec<u8>> {
    let status = Command::new("python3")
        .args(["-c", WHEEL_SCRIPT])
        .arg(path)
        .status()
        .context("python3 builds the test wheel")?;
    ensure!(status.success(), "building the wheel failed: {status}");
    Ok(std::fs::read(path)?)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap_or_default()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The folder the runs' sockets live in (xtask sets it), and whether anything is left in it.
fn runs_dir() -> PathBuf {
    std::env::var_os("AGENTGUARD_RUN_DIR")
        .map_or_else(|| workspace_root().join("target/e2e/runs"), PathBuf::from)
}

fn runs_left() -> Vec<String> {
    std::fs::read_dir(runs_dir())
        .map(|e| {
            e.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Host processes running the relay or its forwarder (under runc a container's processes are
/// visible here; the engine client, whose argv also names the relay, is not one of them).
fn relays_running() -> Result<String> {
    Ok(stdout_text(&output(
        "pgrep",
        &["-af", "^/run/agentguard/relay "],
    )?))
}

#[tokio::test(flavor = "multi_thread")]
async fn from_inside_only_the_proxy_leads_out_and_it_allows_only_the_allowlist() -> Result<()> {
    let combo =
        combo_or_skip!("from_inside_only_the_proxy_leads_out_and_it_allows_only_the_allowlist");
    let world = World::start(combo.clone(), "egress-probe").await?;
    let config = world.config(
        &combo.pytest_image,
        &format!(
            "timeout = 120\n\n[environment]\nPROBE_ALLOWED = \"{ALLOWED}\"\nPROBE_OFFLIST = \"{OFFLIST}\"\nPROBE_PORT = \"{}\"\nPROBE_UPSTREAM_IP = \"127.0.0.2\"\nPROBE_DNS_PORT = \"{}\"\nPROBE_CA = \"/workspace/ca.pem\"\n\n[commands]\nprobe = [\"python3\", \"/workspace/egress_probe.py\"]\n",
            world.upstream.addr().port(),
            world.dns.addr().port()
        ),
    )?;
    let out = tokio::task::block_in_place(|| world.run(&config, "probe"))?;
    let value = json(&out);
    let stdout = value["stdout"].as_str().unwrap_or_default().to_owned();
    ensure!(
        out.status.code() == Some(0) && stdout.contains("done=1"),
        "exit {:?}\n{stdout}\n{}",
        out.status.code(),
        stderr(&out)
    );
    let seen: std::collections::BTreeMap<&str, &str> =
        stdout.lines().filter_map(|l| l.split_once('=')).collect();
    let port = world.upstream.addr().port();
    let checks: Vec<Check> = vec![
        ("allowed", Box::new(|g| g == "200 hello from 127.0.0.2"), "the allowlisted host answers through the proxy, its certificate verified with the test CA".into()),
        ("offlist", Box::new(|g| g.contains("403")), "a host off the allowlist: 403 at CONNECT".into()),
        ("no_proxy", Box::new(|g| g.starts_with("failed")), "without the proxy the allowed host is unreachable".into()),
        ("resolve", Box::new(|g| g.starts_with("failed")), "no name resolves inside".into()),
        ("interfaces", Box::new(|g| g == "lo"), "only the loopback interface".into()),
        ("routes", Box::new(|g| g == "loopback-only"), "no route but loopback ones".into()),
        ("host_upstream", Box::new(|g| g.starts_with("failed")), format!("the host's upstream 127.0.0.2:{port} is unreachable")),
        ("host_dns", Box::new(|g| g.starts_with("failed")), "the host's test DNS server is unreachable".into()),
        ("relay_get", Box::new(|g| g == "405 method_not_allowed"), "a plain GET to the relay's port: 405".into()),
        ("relay_connect_offlist", Box::new(|g| g == "403 domain_not_allowed"), "a CONNECT to an off-list host: 403 with its reason".into()),
    ];
    let wrong: Vec<String> = checks
        .iter()
        .filter_map(|(key, ok, want)| {
            let got = seen.get(key).copied().unwrap_or("<missing>");
            (!ok(got)).then(|| format!("{key}: got {got:?}, want {want}"))
        })
        .collect();
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Host side: the counts, the audit log (verified), and what reached the upstream.
    let container = value["container"].as_str().unwrap_or_default().to_owned();
    ensure!(
        value["egress"]["allowed"] == 1 && value["egress"]["denied"] == 3,
        "egress counts {}",
        value["egress"]
    );
    let connects: Vec<(String, String)> = world
        .audit()?
        .iter()
        .filter(|e| e["kind"] == "egress_connect" && e["subject"]["run"] == container.as_str())
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_owned(),
                e["subject"]["target"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    // In the probe's order: the allowed fetch, the off-list fetch, the plain GET, the CONNECT.
    let reasons: Vec<&str> = connects.iter().map(|(r, _)| r.as_str()).collect();
    ensure!(
        reasons
            == [
                "ok",
                "domain_not_allowed",
                "method_not_allowed",
                "domain_not_allowed"
            ]
            && connects[0].1 == format!("{ALLOWED}:{port}")
            && connects[1].1 == format!("{OFFLIST}:{port}"),
        "audited for run {container}: {connects:?}"
    );
    ensure!(
        world.upstream.seen().len() == 1,
        "upstream saw {:?}",
        world.upstream.seen()
    );
    // Issue 37: the receipt taken inside before the command, the proxy's socket included, is
    // recorded before the run's end; `audit show --run` lists the receipt, the egress, the end.
    let events = world.audit()?;
    let of_run = |kind: &str| {
        events
            .iter()
            .position(|e| e["kind"] == kind && e["data"]["container"] == container.as_str())
    };
    let (receipt, end) = (of_run("isolation_receipt"), of_run("container_run"));
    ensure!(
        receipt.is_some() && receipt < end,
        "receipt {receipt:?}, end {end:?}"
    );
    let receipt = &events[receipt.unwrap_or_default()];
    ensure!(
        receipt["decision"] == "allow" && receipt["data"]["checks"]["proxy"] == "accepts",
        "{receipt}"
    );
    let shown = std::process::Command::new(&combo.binary)
        .args(["audit", "show"])
        .arg(world.audit_path())
        .args(["--run", &container])
        .output()?;
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    let rows: Vec<&str> = shown.lines().skip(1).collect();
    for kind in ["isolation_receipt", "egress_connect", "container_run"] {
        ensure!(
            rows.iter().any(|r| r.contains(kind)),
            "no {kind} in:\n{shown}"
        );
    }
    ensure!(rows.iter().all(|r| r.contains(&container)), "{shown}");
    ensure!(
        runs_left().is_empty(),
        "run folders left: {:?}",
        runs_left()
    );
    println!(
        "{}: {} egress properties checked from inside",
        combo.label(),
        checks.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pip_example_installs_through_the_proxy_and_pytest_imports_it_offline() -> Result<()> {
    let combo =
        combo_or_skip!("the_pip_example_installs_through_the_proxy_and_pytest_imports_it_offline");
    let world = World::start(combo.clone(), "pip").await?;
    std::fs::write(
        world.dir.join("test_uses_dep.py"),
        "import agprobe\n\n\ndef test_the_installed_package_imports():\n    assert agprobe.VALUE == 42\n",
    )?;
    let port = world.upstream.addr().port();
    let config = world.config(
        &combo.pytest_image,
        &format!(
            "workspace_mode = \"rw\"\ntimeout = 180\n\n[environment]\nPYTHONPATH = \"/workspace/.deps\"\n\n[commands.install]\nargv = [\"python3\", \"-m\", \"pip\", \"install\", \"--no-cache-dir\", \"--disable-pip-version-check\", \"--target\", \"/workspace/.deps\", \"--index-url\", \"https://{ALLOWED}:{port}/simple/\", \"--cert\", \"/workspace/ca.pem\", \"agprobe\"]\ndescription = \"Install the test dependency\"\n\n[commands.run_tests]\nargv = [\"python3\", \"-m\", \"pytest\", \"-q\", \"-p\", \"no:cacheprovider\"]\nnetwork = \"none\"\n"
        ),
    )?;
    let install = tokio::task::block_in_place(|| world.run(&config, "install"))?;
    let installed = json(&install);
    ensure!(
        install.status.code() == Some(0) && installed["egress"]["allowed"] == 2,
        "pip install: exit {:?}, json {installed}\n{}",
        install.status.code(),
        stderr(&install)
    );
    let tests = tokio::task::block_in_place(|| world.run(&config, "run_tests"))?;
    let tested = json(&tests);
    let said = tested["stdout"].as_str().unwrap_or_default();
    println!(
        "{}: pip installed through the proxy; pytest in the container said: {}",
        combo.label(),
        said.lines().last().unwrap_or_default()
    );
    ensure!(
        tests.status.code() == Some(0)
            && said.contains("1 passed")
            && tested["egress"]["allowed"] == 0,
        "pytest: exit {:?}, json {tested}\n{}",
        tests.status.code(),
        stderr(&tests)
    );
    let paths: Vec<String> = world
        .upstream
        .seen()
        .iter()
        .filter_map(|s| s.head.split_whitespace().nth(1).map(str::to_owned))
        .collect();
    ensure!(
        paths == ["/simple/agprobe/", "/files/agprobe-1.0-py3-none-any.whl"],
        "the index saw {paths:?}"
    );
    world.audit()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_static_relay_serves_an_image_without_a_c_library() -> Result<()> {
    let combo = combo_or_skip!("a_static_relay_serves_an_image_without_a_c_library");
    let world = World::start(combo.clone(), "busybox-relay").await?;
    // The busybox probe image has no C library at all; its wget and nc talk to the relay.
    let script = format!(
        "wget -q -O- http://127.0.0.1:3128/ 2>&1; printf 'CONNECT {OFFLIST}:{port} HTTP/1.1\\r\\nHost: {OFFLIST}:{port}\\r\\n\\r\\n' | nc 127.0.0.1 3128 | head -3",
        port = world.upstream.addr().port()
    );
    let config = world.config(
        &combo.probe_image,
        &format!("timeout = 60\n\n[commands]\nrelay = [\"sh\", \"-c\", {script:?}]\n"),
    )?;
    let out = tokio::task::block_in_place(|| world.run(&config, "relay"))?;
    let said = json(&out)["stdout"].as_str().unwrap_or_default().to_owned();
    ensure!(
        said.contains("405 Method Not Allowed")
            && said.contains("403 Forbidden")
            && said
                .to_ascii_lowercase()
                .contains("x-agentguard-reason: domain_not_allowed"),
        "exit {:?}: {said}\n{}",
        out.status.code(),
        stderr(&out)
    );
    Ok(())
}

/// A config for the busybox image with `sleepy`, `flood` and `quick` egress commands.
fn lifecycle_config(world: &World, timeout: u64) -> Result<PathBuf> {
    world.config(
        &world.combo.probe_image,
        &format!(
            "timeout = {timeout}\nmax_output_bytes = 4096\n\n[commands]\nsleepy = [\"sh\", \"-c\", \"echo started && exec sleep 60\"]\nflood = [\"yes\", \"flood\"]\n"
        ),
    )
}

fn containers_of(combo: &Combo, pid: u32) -> Result<String> {
    combo.containers_of(pid)
}

/// Waits (bounded) until the run folder of the run `pid` exists and its container runs.
fn wait_for_run(combo: &Combo, pid: u32) -> Result<()> {
    for _ in 0..300 {
        let folder = runs_left()
            .iter()
            .any(|n| n.starts_with(&format!("agentguard-{pid}-")));
        if folder && !containers_of(combo, pid)?.is_empty() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("the run of pid {pid} did not start within 30 s")
}

fn nothing_left(combo: &Combo, pid: u32, after: &str) -> Result<()> {
    let (mut containers, mut relays) = (String::new(), String::new());
    for _ in 0..50 {
        containers = containers_of(combo, pid)?;
        relays = relays_running()?;
        if containers.is_empty() && relays.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    ensure!(
        containers.is_empty() && runs_left().is_empty() && relays.is_empty(),
        "after {after}: containers {containers:?}, run folders {:?}, relays {relays:?}",
        runs_left()
    );
    Ok(())
}

#[test]
fn a_timeout_a_flood_and_sigterm_leave_no_proxy_socket_relay_or_container() -> Result<()> {
    let combo =
        combo_or_skip!("a_timeout_a_flood_and_sigterm_leave_no_proxy_socket_relay_or_container");
    let runtime = tokio::runtime::Runtime::new()?;
    let world = runtime.block_on(World::start(combo.clone(), "lifecycle"))?;
    let short = lifecycle_config(&world, 5)?;
    for (name, code, after) in [("sleepy", 124, "a timeout"), ("flood", 122, "a flood")] {
        let mut child = Command::new(&combo.binary)
            .args(["run", "--config"])
            .arg(&short)
            .arg(name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pid = child.id();
        let status = child.wait()?;
        ensure!(
            status.code() == Some(code),
            "{name}: exit {status}, want {code}"
        );
        nothing_left(&combo, pid, after)?;
    }
    let long = lifecycle_config(&world, 120)?;
    let mut child = Command::new(&combo.binary)
        .args(["run", "--config"])
        .arg(&long)
        .arg("sleepy")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    wait_for_run(&combo, child.id())?;
    output("kill", &["-TERM", &child.id().to_string()])?;
    let status = child.wait()?;
    ensure!(status.code() == Some(143), "SIGTERM: exit {status}");
    nothing_left(&combo, child.id(), "SIGTERM")?;
    Ok(())
}

#[test]
fn after_a_sigkill_gc_removes_the_container_and_the_run_folder() -> Result<()> {
    let combo = combo_or_skip!("after_a_sigkill_gc_removes_the_container_and_the_run_folder");
    let runtime = tokio::runtime::Runtime::new()?;
    let world = runtime.block_on(World::start(combo.clone(), "egress-sigkill"))?;
    let config = lifecycle_config(&world, 120)?;
    let mut child = Command::new(&combo.binary)
        .args(["run", "--config"])
        .arg(&config)
        .arg("sleepy")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    wait_for_run(&combo, pid)?;
    // Killed once the command itself runs (its first line), past the isolation receipt,
    // which needs agentguard's proxy and so does not outlive agentguard.
    let mut started = String::new();
    let stdout = child.stdout.take().context("the run's stdout")?;
    let mut stdout = std::io::BufReader::new(stdout);
    std::io::BufRead::read_line(&mut stdout, &mut started)?;
    ensure!(started == "started\n", "the command said {started:?}");
    child.kill()?;
    child.wait()?;
    let survived = !containers_of(&combo, pid)?.is_empty() && !runs_left().is_empty();
    let gc = Command::new(&combo.binary).arg("gc").output()?;
    let said = String::from_utf8_lossy(&gc.stdout).into_owned();
    ensure!(
        survived && gc.status.success() && said.contains("run folders: removed"),
        "survived: {survived}, gc said: {said}"
    );
    nothing_left(&combo, pid, "SIGKILL and gc")?;
    Ok(())
}

//! Every hardening default, seen from inside a running container by the probe script.

use std::collections::BTreeMap;
use std::time::Duration;

use agentguard_e2e::{Combo, Folder, PROBE};
use anyhow::{Result, bail};

use crate::combo_or_skip;

type Check = (&'static str, Box<dyn Fn(&str) -> bool>, &'static str);

fn expectations(combo: &Combo) -> Vec<Check> {
    let eq = |want: &'static str| -> Box<dyn Fn(&str) -> bool> { Box::new(move |got| got == want) };
    let has = |want: &'static str| -> Box<dyn Fn(&str) -> bool> {
        Box::new(move |got| got.contains(want) && !got.contains("allowed"))
    };
    let mut checks: Vec<Check> = vec![
        ("uid", eq("65534"), "65534 (user nobody)"),
        ("gid", eq("65534"), "65534"),
        (
            "capeff",
            eq("0000000000000000"),
            "no effective capabilities",
        ),
        ("capbnd", eq("0000000000000000"), "empty bounding set"),
        (
            "root_write",
            has("Read-only file system"),
            "a write to 1777 /scratch refused by the read-only root",
        ),
        (
            "workspace_write",
            has("Read-only file system"),
            "a write to the 65534-owned workspace refused by the ro mount",
        ),
        (
            "workspace_read",
            eq("hello from the host"),
            "the workspace marker readable",
        ),
        ("tmp_write", eq("allowed"), "/tmp writable"),
        ("tmp_exec", has("Permission denied"), "/tmp noexec"),
        (
            "tmp_cap",
            Box::new(|got: &str| {
                got.parse::<u64>()
                    .is_ok_and(|n| n <= 64 << 20 && n > 32 << 20)
            }),
            "a 70 MB write to /tmp stops at the 64 MiB cap",
        ),
        (
            "shm_write",
            Box::new(|got: &str| !got.contains("allowed")),
            "/dev/shm not writable (--ipc none)",
        ),
        ("interfaces", eq("lo"), "only the loopback interface"),
        ("env_canary", eq("absent"), "no host environment variable"),
        ("env_http_proxy", eq("absent"), "no host proxy variable"),
        (
            "env_configured",
            eq("yes"),
            "the configured environment present",
        ),
        (
            "pid1",
            Box::new(|got: &str| {
                got.contains("init")
                    || got.contains("catatonit")
                    || got.contains("tini")
                    || got.contains("relay")
            }),
            "an init process as pid 1 (--init without the relay; engine = \"oci\": the relay)",
        ),
        (
            "zombies",
            eq("0"),
            "an orphan that ended was reaped by pid 1",
        ),
        ("done", eq("1"), "the probe ran to the end"),
    ];
    // /proc/kcore masked (an empty file), or under gVisor not there at all.
    checks.push((
        "kcore",
        Box::new(|got: &str| got == "0" || got == "absent"),
        "/proc/kcore masked",
    ));
    if combo.gvisor() && combo.engine != agentguard_container::EngineKind::Oci {
        // Docker and Podman do not pass --oci-seccomp to runsc: the OCI filter is not loaded
        // inside the sandbox (gVisor's own kernel is the boundary; ENGINES.md).
        checks.push((
            "seccomp",
            eq("0"),
            "0 under gVisor through an engine (no --oci-seccomp)",
        ));
    } else if combo.gvisor() {
        // engine = "oci" passes --oci-seccomp: gVisor applies the filter inside and shows it.
        checks.push(("seccomp", eq("2"), "the OCI filter loaded inside gVisor"));
    } else {
        checks.push(("seccomp", eq("2"), "a seccomp filter active (Seccomp: 2)"));
        checks.push((
            "cpu_quota",
            eq("100000"),
            "cpus 1: a 100 ms quota per 100 ms",
        ));
    }
    if combo.gvisor() {
        // gVisor shows neither NoNewPrivs nor the cgroup files inside; its limits are proved
        // from outside (the memory, fork bomb and ordinary-script tests).
        checks.push((
            "nonewprivs",
            Box::new(|got: &str| got.is_empty() || got == "1"),
            "absent under gVisor, or 1",
        ));
    } else {
        checks.push(("nonewprivs", eq("1"), "no-new-privileges set"));
        checks.push(("pids_max", eq("128"), "pids limit 128"));
        checks.push(("memory_limit", eq("536870912"), "memory limit 512 MiB"));
    }
    checks
}

#[tokio::test]
async fn the_probe_sees_every_hardening_default_from_inside() -> Result<()> {
    let combo = combo_or_skip!("the_probe_sees_every_hardening_default_from_inside");
    let ro = Folder::new(&combo.unique("ro"), (65534, 65534))?;
    let executor = combo.executor(
        combo
            .builder(&combo.probe_image)
            .workspace(&ro.0)
            .env("AGENTGUARD_E2E_CONFIGURED", "yes")
            .command("probe", ["sh", "-c", PROBE])
            .timeout(Duration::from_secs(60))
            .build()?,
    )?;
    let probe = executor.run(&executor.invoke("probe", &[])?).await?;
    let stdout = String::from_utf8_lossy(&probe.stdout).into_owned();
    if probe.exit_code != Some(0) {
        bail!(
            "the probe exited {:?}\nstdout:\n{stdout}\nstderr:\n{}",
            probe.exit_code,
            String::from_utf8_lossy(&probe.stderr)
        );
    }
    let seen: BTreeMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once('=')).collect();
    let checks = expectations(&combo);
    let wrong: Vec<String> = checks
        .iter()
        .filter_map(|(key, check, want)| {
            let got = seen.get(key).copied().unwrap_or("<missing>").trim();
            (!check(got)).then(|| format!("{key}: got {got:?}, want {want}"))
        })
        .collect();
    if !wrong.is_empty() {
        bail!("{}", wrong.join("\n"));
    }
    println!(
        "{}: {} properties checked from inside",
        combo.label(),
        checks.len()
    );
    Ok(())
}

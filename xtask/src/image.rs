//! Builds the tiny probe image locally, without any registry.
//!
//! Nothing can be pulled on our machines, so the image is a root folder with the static
//! busybox from Debian's `busybox-static` package and its applet links, imported with
//! `docker import` / `podman import`. `/tmp` is 1777 because a tmpfs mounted there takes its
//! mode from the image (ENGINES.md), and `/scratch` is 1777 so that the read-only root is
//! proved by a write that only `--read-only` can stop, not file permissions.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::cmd;

/// The probe image's reference. Bump the tag when the root folder's layout changes.
pub(crate) const PROBE_IMAGE: &str = "localhost/agentguard-probe:2";

const BUSYBOX: &str = "/bin/busybox";

/// Makes sure the probe image exists for `engine` (`docker` or `podman`).
pub(crate) fn ensure_probe_image(engine: &str) -> Result<()> {
    if cmd::succeeds(engine, &["image", "inspect", PROBE_IMAGE]) {
        return Ok(());
    }
    let root = cmd::root().join("target/xtask/probe-rootfs");
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    for dir in [
        "bin",
        "etc",
        "tmp",
        "scratch",
        "workspace",
        "proc",
        "sys",
        "dev",
    ] {
        fs::create_dir_all(root.join(dir))?;
    }
    fs::copy(BUSYBOX, root.join("bin/busybox")).with_context(|| {
        format!("copying {BUSYBOX} (install busybox-static: cargo xtask setup)")
    })?;
    let applets = cmd::output(BUSYBOX, &["--list"])?;
    for applet in String::from_utf8_lossy(&applets.stdout).lines() {
        if applet != "busybox" && !applet.is_empty() {
            symlink("busybox", root.join("bin").join(applet))?;
        }
    }
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777))?;
    fs::set_permissions(root.join("scratch"), fs::Permissions::from_mode(0o1777))?;
    fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n",
    )?;
    fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;

    println!("   building {PROBE_IMAGE} for {engine} from {BUSYBOX}");
    let mut tar = Command::new("tar")
        .args(["-C"])
        .arg(&root)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tar")?;
    let tar_out = tar.stdout.take().context("tar stdout")?;
    let import = Command::new(engine)
        .args(["import", "-", PROBE_IMAGE])
        .stdin(tar_out)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("starting {engine} import"))?;
    let tar_status = tar.wait()?;
    if !tar_status.success() || !import.success() {
        bail!("building {PROBE_IMAGE} for {engine} failed (tar: {tar_status}, import: {import})");
    }
    Ok(())
}

/// The realistic image of the spec's headline example: Debian minbase with python3 and pytest.
pub(crate) const PYTEST_IMAGE: &str = "localhost/agentguard-pytest:1";

/// The Debian mirror configured on this machine (deb822 or one-line sources), else Debian's.
fn debian_mirror() -> String {
    let mut texts = Vec::new();
    for dir in ["/etc/apt/sources.list.d", "/etc/apt"] {
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.flatten() {
                if let Ok(text) = fs::read_to_string(entry.path()) {
                    texts.push(text);
                }
            }
        }
    }
    for text in texts {
        for line in text.lines() {
            let line = line.trim();
            let url = line.strip_prefix("URIs:").map(str::trim).or_else(|| {
                line.strip_prefix("deb ")
                    .and_then(|rest| rest.split_whitespace().find(|w| w.starts_with("http")))
            });
            if let Some(url) = url.and_then(|u| u.split_whitespace().next())
                && url.starts_with("http")
                && !url.contains("security")
            {
                return url.to_owned();
            }
        }
    }
    "http://deb.debian.org/debian".to_owned()
}

/// Makes sure the pytest image exists for `engine`, building the root folder with debootstrap
/// once (about 40 s) and importing it without any registry.
pub(crate) fn ensure_pytest_image(engine: &str) -> Result<()> {
    if cmd::succeeds(engine, &["image", "inspect", PYTEST_IMAGE]) {
        return Ok(());
    }
    let root = cmd::root().join("target/xtask/pytest-rootfs");
    let done = cmd::root().join("target/xtask/pytest-rootfs.done");
    if !done.exists() {
        if root.exists() {
            fs::remove_dir_all(&root)?;
        }
        let mirror = debian_mirror();
        println!(
            "   building {PYTEST_IMAGE}: debootstrap --variant=minbase --include=python3,python3-pytest bookworm ({mirror})"
        );
        let status = Command::new("debootstrap")
            .args([
                "--variant=minbase",
                "--include=python3,python3-pytest",
                "bookworm",
            ])
            .arg(&root)
            .arg(&mirror)
            .stdout(Stdio::null())
            .status()
            .context("starting debootstrap (cargo xtask setup installs it)")?;
        if !status.success() {
            bail!(
                "debootstrap failed ({status}); see its log in {}/debootstrap/debootstrap.log",
                root.display()
            );
        }
        fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777))?;
        fs::create_dir_all(root.join("workspace"))?;
        fs::write(&done, "")?;
    }
    println!("   importing {PYTEST_IMAGE} into {engine}");
    let mut tar = Command::new("tar")
        .args(["-C"])
        .arg(&root)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tar")?;
    let tar_out = tar.stdout.take().context("tar stdout")?;
    let import = Command::new(engine)
        .args(["import", "-", PYTEST_IMAGE])
        .stdin(tar_out)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("starting {engine} import"))?;
    let tar_status = tar.wait()?;
    if !tar_status.success() || !import.success() {
        bail!(
            "importing {PYTEST_IMAGE} into {engine} failed (tar: {tar_status}, import: {import})"
        );
    }
    Ok(())
}

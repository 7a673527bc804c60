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
    import_rootfs(engine, &root, PROBE_IMAGE)
}

/// The realistic image of the spec's headline example: Debian minbase with python3, pytest and
/// pip (for the package install through the egress proxy). Bump the tag, and the root
/// folder's name below, when the package list changes.
pub(crate) const PYTEST_IMAGE: &str = "localhost/agentguard-pytest:2";
const PYTEST_PACKAGES: &str = "python3,python3-pytest,python3-pip";

/// The Debian mirror configured on this machine for the `bookworm` suite (deb822 stanzas or
/// one-line sources). Other repositories (security, third parties) are skipped: debootstrap
/// needs the main archive.
fn debian_mirror() -> Result<String> {
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
    texts.iter().find_map(|text| mirror_in(text)).context(
        "no Debian mirror for bookworm is configured in /etc/apt/sources.list or /etc/apt/sources.list.d; configure one (debootstrap builds the pytest image from it)",
    )
}

/// The first `bookworm` archive URI in one sources file.
fn mirror_in(text: &str) -> Option<String> {
    let usable = |url: &str| url.starts_with("http") && !url.contains("security");
    // deb822: stanzas separated by blank lines, with `URIs:` and `Suites:` fields.
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .map(str::trim)
        };
        if let (Some(uris), Some(suites)) = (field("URIs:"), field("Suites:"))
            && suites.split_whitespace().any(|s| s == "bookworm")
            && let Some(url) = uris.split_whitespace().find(|u| usable(u))
        {
            return Some(url.to_owned());
        }
    }
    // One-line form: `deb [options] URL SUITE COMPONENTS...`.
    text.lines().find_map(|line| {
        let words: Vec<&str> = line
            .split_whitespace()
            .filter(|w| !w.starts_with('[') && !w.ends_with(']'))
            .collect();
        match words.as_slice() {
            ["deb", url, "bookworm", ..] if usable(url) => Some((*url).to_owned()),
            _ => None,
        }
    })
}

/// Makes sure the pytest image exists for `engine`, building the root folder with debootstrap
/// once (about 40 s) and importing it without any registry.
pub(crate) fn ensure_pytest_image(engine: &str) -> Result<()> {
    if cmd::succeeds(engine, &["image", "inspect", PYTEST_IMAGE]) {
        return Ok(());
    }
    let root = cmd::root().join("target/xtask/pytest-rootfs-2");
    let done = cmd::root().join("target/xtask/pytest-rootfs-2.done");
    if !done.exists() {
        if root.exists() {
            fs::remove_dir_all(&root)?;
        }
        let mirror = debian_mirror()?;
        println!(
            "   building {PYTEST_IMAGE}: debootstrap --variant=minbase --include={PYTEST_PACKAGES} bookworm ({mirror})"
        );
        let status = Command::new("debootstrap")
            .args([
                "--variant=minbase",
                &format!("--include={PYTEST_PACKAGES}"),
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
    import_rootfs(engine, &root, PYTEST_IMAGE)
}

/// `tar -C ROOT -c . | ENGINE import - TAG`: an image from a root folder, without a registry.
fn import_rootfs(engine: &str, root: &std::path::Path, tag: &str) -> Result<()> {
    let mut tar = Command::new("tar")
        .args(["-C"])
        .arg(root)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tar")?;
    let tar_out = tar.stdout.take().context("tar stdout")?;
    let import = Command::new(engine)
        .args(["import", "-", tag])
        .stdin(tar_out)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("starting {engine} import"))?;
    let tar_status = tar.wait()?;
    if !tar_status.success() || !import.success() {
        bail!("importing {tag} into {engine} failed (tar: {tar_status}, import: {import})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bookworm_archive_is_chosen_over_other_repositories() {
        let deb822 = "Types: deb\nURIs: https://other.example.test/node\nSuites: nodistro\n\nTypes: deb\nURIs: http://mirror.example.test/debian\nSuites: bookworm bookworm-updates\nComponents: main\n";
        assert_eq!(
            super::mirror_in(deb822).as_deref(),
            Some("http://mirror.example.test/debian")
        );
        let security = "Types: deb\nURIs: http://mirror.example.test/debian-security\nSuites: bookworm-security\n";
        assert_eq!(super::mirror_in(security), None);
        let one_line = "deb [arch=amd64] https://other.example.test/node nodistro main\ndeb http://mirror.example.test/debian bookworm main\n";
        assert_eq!(
            super::mirror_in(one_line).as_deref(),
            Some("http://mirror.example.test/debian")
        );
    }
}

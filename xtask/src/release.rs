//! What is shipped: one static `agentguard` binary, as the cluster's proxy image
//! (`cargo xtask image proxy`) and as a tarball to copy onto a machine (`cargo xtask dist`).
//!
//! The binary is the CLI built in release mode with the C library linked statically
//! (crt-static, given to the final crate alone, so it shares every other crate with README's
//! `cargo install` build in `target/ship/host`), checked to be a static executable by the same
//! check the relay gets. The image holds that binary, an `/etc/passwd`
//! and `/etc/group` line for 65534, the CA roots, and nothing else: no shell, no package
//! manager. It is imported into Docker and Podman without a registry, and each is checked by
//! running it read-only as 65534 with every capability dropped and no network.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::cmd;

/// The proxy image's reference (`[kubernetes] proxy_image`).
pub(crate) fn proxy_image_tag() -> String {
    format!("localhost/agentguard-proxy:{}", env!("CARGO_PKG_VERSION"))
}

const CA_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// This machine's target triple, as rustc names it.
fn host_triple() -> Result<String> {
    let out = cmd::output("rustc", &["-vV"])?;
    cmd::stdout_text(&out)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .context("rustc -vV printed no host line")
}

/// Builds the static release binary; returns its path and the target triple.
pub(crate) fn static_binary() -> Result<(PathBuf, String)> {
    let triple = host_triple()?;
    println!("== release: a static agentguard for {triple} (crt-static)");
    // The C library is linked statically into the binary alone: `cargo rustc` gives the flag
    // to the final crate only, so every crate below it is the release build `cargo install`
    // makes in the same folder, and the static binary costs one crate and a link instead of
    // a second build of the tree. That is sound because what crt-static changes is decided at
    // the final link: the C library's `#[link(cfg(target_feature = "crt-static"))]` attributes,
    // in `libc` and in the standard library (itself built once, without the flag), are read
    // with the final crate's features. One crate of the tree reads the feature in its code
    // (resolv-conf, which without it asks the C library's `gethostname` for the host name
    // instead of reading /proc, and the static C library has that call too). No build script
    // or proc macro gets the flag (they cannot be static), and the check below refuses a
    // binary that is not static.
    let target = cmd::ship_dir("host");
    cmd::run_with(
        &cmd::root(),
        &[("CARGO_TARGET_DIR", &target.to_string_lossy())],
        "cargo",
        &[
            "rustc",
            "--release",
            "--locked",
            "--quiet",
            "--package",
            "agentguard-cli",
            "--bin",
            "agentguard",
            "--",
            "-C",
            "target-feature=+crt-static",
        ],
    )?;
    let built = target.join("release/agentguard");
    // The release profile has no debug info; what is shipped has no symbols either.
    let binary = cmd::target_dir().join("xtask/agentguard-static");
    fs::create_dir_all(cmd::target_dir().join("xtask"))?;
    cmd::run(
        "strip",
        &["-o", &binary.to_string_lossy(), &built.to_string_lossy()],
    )?;
    let bytes = fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?;
    agentguard_sandbox::relay::static_executable(&bytes)
        .map_err(|why| anyhow::anyhow!("{} is not a static executable: {why}", binary.display()))?;
    println!("   {} ({} bytes, static)", binary.display(), bytes.len());
    Ok((binary, triple))
}

/// The most the installed binary may weigh (issue 38): 25 MiB.
const MAX_INSTALLED_BYTES: u64 = 25 << 20;

/// What README's Install section says, checked: `cargo install --locked` of the CLI into a
/// fresh root (built in the `host` folder, which the static binary and the wheel built from
/// source share), its `--version`, and its size against [`MAX_INSTALLED_BYTES`].
pub(crate) fn install_check() -> Result<()> {
    println!("== release: cargo install --locked, as README's Install section says");
    let root = cmd::target_dir().join("xtask/install");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    let target = cmd::ship_dir("host");
    cmd::run_with(
        &cmd::root(),
        &[("CARGO_TARGET_DIR", &target.to_string_lossy())],
        "cargo",
        &[
            "install",
            "--locked",
            "--quiet",
            "--path",
            "crates/agentguard-cli",
            "--root",
            &root.to_string_lossy(),
        ],
    )?;
    let binary = root.join("bin/agentguard");
    let version = cmd::output(&binary.to_string_lossy(), &["--version"])?;
    let said = cmd::stdout_text(&version);
    if !version.status.success() || !said.contains(env!("CARGO_PKG_VERSION")) {
        bail!("{} --version said {said:?}", binary.display());
    }
    let size = fs::metadata(&binary)?.len();
    println!(
        "   {} ({said}): {size} bytes ({:.1} MiB)",
        binary.display(),
        size as f64 / f64::from(1u32 << 20)
    );
    if size > MAX_INSTALLED_BYTES {
        bail!("the installed binary is {size} bytes, more than {MAX_INSTALLED_BYTES}");
    }
    Ok(())
}

/// `cargo xtask image proxy`: the image in every engine here; prints what to configure.
pub(crate) fn proxy_image() -> Result<()> {
    let (binary, _) = static_binary()?;
    let root = cmd::root().join("target/xtask/proxy-rootfs");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    fs::create_dir_all(root.join("usr/local/bin"))?;
    fs::create_dir_all(root.join("etc/ssl/certs"))?;
    fs::copy(&binary, root.join("usr/local/bin/agentguard"))?;
    fs::write(
        root.join("etc/passwd"),
        "nobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n",
    )?;
    fs::write(root.join("etc/group"), "nogroup:x:65534:\n")?;
    fs::copy(CA_ROOTS, root.join("etc/ssl/certs/ca-certificates.crt"))
        .with_context(|| format!("copying {CA_ROOTS} (Debian's ca-certificates package)"))?;
    let tag = proxy_image_tag();
    let engines: Vec<&str> = ["docker", "podman"]
        .into_iter()
        .filter(|e| cmd::succeeds(e, &["version"]))
        .collect();
    if engines.is_empty() {
        bail!("neither docker nor podman answers `version`: run `cargo xtask setup`");
    }
    for engine in engines {
        import(engine, &root, &tag)?;
        check(engine, &tag)?;
        let id = cmd::output(engine, &["image", "inspect", "--format", "{{.Id}}", &tag])?;
        let id = cmd::stdout_text(&id).trim().to_owned();
        println!("   {engine}: {tag}, image ID {id}");
    }
    println!(
        "   set [kubernetes] proxy_image to this image in your registry, pinned by the digest the push prints (docs/kubernetes.md)"
    );
    Ok(())
}

/// `tar | ENGINE import` with the image's user, PATH and entrypoint.
fn import(engine: &str, root: &Path, tag: &str) -> Result<()> {
    let archive = cmd::root().join("target/xtask/proxy-rootfs.tar");
    cmd::run(
        "tar",
        &[
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
            &root.to_string_lossy(),
            "-cf",
            &archive.to_string_lossy(),
            ".",
        ],
    )?;
    cmd::run(
        engine,
        &[
            "import",
            "--change",
            "USER 65534:65534",
            "--change",
            "ENV PATH=/usr/local/bin",
            "--change",
            "ENTRYPOINT [\"/usr/local/bin/agentguard\"]",
            &archive.to_string_lossy(),
            tag,
        ],
    )
}

/// Runs the image as the cluster runs it (read-only, 65534, no capability, no network): it
/// answers, and has no shell.
fn check(engine: &str, tag: &str) -> Result<()> {
    let hardened = |args: &[&str]| {
        let mut all = vec![
            "run",
            "--rm",
            "--read-only",
            "--user",
            "65534:65534",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--network",
            "none",
            // Podman's default ulimits exceed this VM's hard limits (ENGINES.md).
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
        ];
        all.extend_from_slice(args);
        cmd::output(engine, &all)
    };
    let version = hardened(&[tag, "--version"])?;
    let want = format!("agentguard {}", env!("CARGO_PKG_VERSION"));
    if !version.status.success() || cmd::stdout_text(&version).trim() != want {
        bail!(
            "{engine}: {tag} --version printed {:?} ({}): {}",
            cmd::stdout_text(&version),
            version.status,
            String::from_utf8_lossy(&version.stderr)
        );
    }
    let classify = hardened(&[tag, "classify", "10.0.0.1"])?;
    if !cmd::stdout_text(&classify).contains("non-public") {
        bail!(
            "{engine}: {tag} classify 10.0.0.1 printed {:?}",
            cmd::stdout_text(&classify)
        );
    }
    let shell = hardened(&["--entrypoint", "/bin/sh", tag, "-c", "true"])?;
    // 127: the engine found no such executable (any other failure proves nothing).
    let said = String::from_utf8_lossy(&shell.stderr).to_lowercase();
    if shell.status.code() != Some(127) || !said.contains("no such file") {
        bail!(
            "{engine}: {tag} with /bin/sh as its entrypoint did not fail for want of /bin/sh ({}): {said}; the proxy image must hold nothing but agentguard",
            shell.status
        );
    }
    println!("   {engine}: {tag} runs read-only as 65534 with no capability; no /bin/sh");
    Ok(())
}

/// `cargo xtask dist`: `target/dist/agentguard-VERSION-TRIPLE.tar.gz` (the static binary, its
/// man page `agentguard.1` and its shell completions) and its `.sha256`.
pub(crate) fn dist() -> Result<PathBuf> {
    let (binary, triple) = static_binary()?;
    let name = format!("agentguard-{}-{triple}", env!("CARGO_PKG_VERSION"));
    let out = cmd::root().join("target/dist");
    let stage = out.join(&name);
    if stage.exists() {
        fs::remove_dir_all(&stage)?;
    }
    fs::create_dir_all(stage.join("completions"))?;
    fs::copy(&binary, stage.join("agentguard"))?;
    for (shell, file) in [
        ("bash", "agentguard.bash"),
        ("zsh", "_agentguard"),
        ("fish", "agentguard.fish"),
    ] {
        let script = cmd::output(&binary.to_string_lossy(), &["completions", shell])?;
        if !script.status.success() || script.stdout.is_empty() {
            bail!("agentguard completions {shell} failed ({})", script.status);
        }
        fs::write(stage.join("completions").join(file), &script.stdout)?;
    }
    let page = cmd::output(&binary.to_string_lossy(), &["manpage"])?;
    if !page.status.success()
        || !page.stdout.starts_with(b".ie") && !page.stdout.starts_with(b".TH")
    {
        bail!("agentguard manpage failed ({})", page.status);
    }
    fs::write(stage.join("agentguard.1"), &page.stdout)?;
    let tarball = out.join(format!("{name}.tar.gz"));
    cmd::run(
        "tar",
        &[
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--sort=name",
            "--mtime=@0",
            "-C",
            &out.to_string_lossy(),
            "-czf",
            &tarball.to_string_lossy(),
            &name,
        ],
    )?;
    // The checksum file is `sha256sum`'s own output, so `sha256sum -c` checks it.
    let file_name = tarball
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let sum = std::process::Command::new("sha256sum")
        .arg(&file_name)
        .current_dir(&out)
        .output()
        .context("running sha256sum")?;
    if !sum.status.success() {
        bail!("sha256sum {file_name} failed ({})", sum.status);
    }
    let checksum = out.join(format!("{file_name}.sha256"));
    fs::write(&checksum, &sum.stdout)?;
    cmd::run_in(
        &out,
        "sha256sum",
        &["--check", "--quiet", &format!("{file_name}.sha256")],
    )?;
    println!("   wrote {} and {}", tarball.display(), checksum.display());
    Ok(tarball)
}

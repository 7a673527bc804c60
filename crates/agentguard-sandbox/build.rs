//! Builds the relay (`crates/agentguard-relay`: std and rustix, its one safe system-call
//! crate) into a static executable and leaves it in OUT_DIR, where `relay.rs` embeds it:
//! every build of the CLI (`cargo install` included) carries a relay that runs in any image,
//! with no musl target. The relay is built by its own cargo, for this target, into its own
//! folder under OUT_DIR, from the workspace's lock file and the crates already downloaded
//! (`--locked --offline`). A relay that cannot be linked statically fails the build, never
//! the run.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let relay = manifest.join("../agentguard-relay");
    for path in [
        relay.join("src/main.rs"),
        relay.join("Cargo.toml"),
        manifest.join("../../Cargo.lock"),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-env-changed=RUSTC");
    let out = PathBuf::from(env("OUT_DIR"));
    let target = env("TARGET");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(["build", "--quiet", "--release", "--locked", "--offline"])
        .args(["--package", "agentguard-relay", "--target", &target])
        .arg("--manifest-path")
        .arg(relay.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(out.join("relay-build"))
        // Static, small, and built the same whatever built this crate (clippy, a wrapper).
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "2")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        // A linker chosen for the crate that embeds the relay (maturin's zig, which cannot
        // link glibc statically and then links dynamically) is not the relay's: the default
        // one links it statically.
        .env_remove(format!(
            "CARGO_TARGET_{}_LINKER",
            target.to_uppercase().replace(['-', '.'], "_")
        ))
        .env_remove("RUSTC_LINKER")
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => fail(&format!(
            "`{cargo} build -p agentguard-relay` exited with {status}"
        )),
        Err(e) => fail(&format!("cannot run {cargo}: {e}")),
    }
    let built = out
        .join("relay-build")
        .join(&target)
        .join("release/agentguard-relay");
    match std::fs::read(&built) {
        Ok(bytes) if has_interpreter(&bytes) => fail(&format!(
            "{} was linked dynamically (it names a program interpreter)",
            built.display()
        )),
        Ok(_) => {}
        Err(e) => fail(&format!("cannot read {}: {e}", built.display())),
    }
    if let Err(e) = std::fs::copy(&built, out.join("agentguard-relay")) {
        fail(&format!("cannot copy {}: {e}", built.display()));
    }
}

/// True when the ELF64 file `bytes` has a `PT_INTERP` program header (a dynamic executable),
/// or is not one this check can read (which then fails the build too).
fn has_interpreter(bytes: &[u8]) -> bool {
    let field = |at: usize, len: usize| -> Option<u64> {
        let raw = bytes.get(at..at + len)?;
        Some(raw.iter().rev().fold(0u64, |n, b| n << 8 | u64::from(*b)))
    };
    let header = || -> Option<bool> {
        if bytes.get(..5)? != b"\x7fELF\x02" || bytes.get(5) != Some(&1) {
            return None;
        }
        let (offset, size, count) = (field(0x20, 8)?, field(0x36, 2)?, field(0x38, 2)?);
        Some((0..count).any(|i| {
            let at = usize::try_from(offset + i * size).unwrap_or(usize::MAX);
            field(at, 4) == Some(3)
        }))
    };
    header().unwrap_or(true)
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| fail(&format!("cargo did not set {key}")))
}

fn fail(why: &str) -> ! {
    panic!(
        "building the static agentguard relay failed: {why}. It links the C library statically: install its static archive (Debian: `apt-get install libc6-dev`)"
    )
}

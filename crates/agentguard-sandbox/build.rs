//! Builds the relay (`crates/agentguard-relay`: std and rustix, its one safe system-call
//! crate) into a static executable and leaves it in OUT_DIR, where `relay.rs` embeds it:
//! every build of the CLI (`cargo install` included) carries a relay that runs in any image,
//! with no musl target. The relay is built by its own cargo, for this target, into its own
//! folder under OUT_DIR, from the workspace's lock file and the crates already downloaded
//! (`--locked --offline`). A relay that cannot be linked statically fails the build, never
//! the run.

use std::path::PathBuf;
use std::process::Command;

#[path = "src/elf.rs"]
mod elf;

fn main() {
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let relay = manifest.join("../agentguard-relay");
    // The whole source folder: a change to any of its modules rebuilds the relay.
    for path in [
        relay.join("src"),
        relay.join("Cargo.toml"),
        manifest.join("../../Cargo.lock"),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-changed=src/elf.rs");
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
    let arch = env("CARGO_CFG_TARGET_ARCH");
    match std::fs::read(&built).map(|bytes| elf::static_executable_for(&bytes, &arch)) {
        Ok(Ok(())) => {}
        Ok(Err(why)) => fail(&format!("{} {why}", built.display())),
        Err(e) => fail(&format!("cannot read {}: {e}", built.display())),
    }
    if let Err(e) = std::fs::copy(&built, out.join("agentguard-relay")) {
        fail(&format!("cannot copy {}: {e}", built.display()));
    }
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| fail(&format!("cargo did not set {key}")))
}

fn fail(why: &str) -> ! {
    panic!(
        "building the static agentguard relay failed: {why}. It links the C library statically: install its static archive (Debian: `apt-get install libc6-dev`)"
    )
}

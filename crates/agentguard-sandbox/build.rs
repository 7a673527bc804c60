//! Compiles the relay (`crates/agentguard-relay/src/main.rs`, std only) into a static
//! executable and leaves it in OUT_DIR, where `relay.rs` embeds it: every build of the CLI
//! (`cargo install` included) carries a relay that runs in any image, with no musl target.
//! A relay that cannot be linked statically fails the build, never the run.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = PathBuf::from(env("CARGO_MANIFEST_DIR")).join("../agentguard-relay/src/main.rs");
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-env-changed=RUSTC");
    let out = PathBuf::from(env("OUT_DIR")).join("agentguard-relay");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let status = Command::new(&rustc)
        .args(["--edition", "2024", "--crate-type", "bin"])
        .args([
            "--crate-name",
            "agentguard_relay",
            "--target",
            &env("TARGET"),
        ])
        .args([
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .args(["-C", "target-feature=+crt-static"])
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => fail(&format!("{rustc} exited with {status}")),
        Err(e) => fail(&format!("cannot run {rustc}: {e}")),
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

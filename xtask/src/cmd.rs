//! Small helpers for running commands from xtask, echoing what they do.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use anyhow::{Context, Result, bail};

/// The workspace root (the parent of `xtask/`).
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// Cargo's target folder: `CARGO_TARGET_DIR` when set (relative to the workspace root), else
/// `target/` in the root.
pub(crate) fn target_dir() -> PathBuf {
    target_dir_from(std::env::var_os("CARGO_TARGET_DIR"))
}

fn target_dir_from(var: Option<std::ffi::OsString>) -> PathBuf {
    match var.filter(|v| !v.is_empty()) {
        Some(dir) => root().join(dir),
        None => root().join("target"),
    }
}

/// The cargo target folder of one kind of release build of what is shipped: `wheel` (maturin
/// with zig's linker) and `host` (`cargo install`, the static binary and the wheel built from
/// source, which share what they can). Each kind builds with its own flags,
/// which would make one folder rebuild everything at every switch; and none holds the lock of
/// `target/`, so CI builds them while the tests build and run there.
pub(crate) fn ship_dir(kind: &str) -> PathBuf {
    target_dir().join("ship").join(kind)
}

/// Builds the debug `agentguard` binary (what e2e and the demo run); returns its path.
pub(crate) fn debug_binary() -> Result<PathBuf> {
    run(
        "cargo",
        &["build", "--quiet", "--package", "agentguard-cli"],
    )?;
    Ok(target_dir().join("debug/agentguard"))
}

/// Prints the command line, runs it with inherited stdio, and fails unless it exits 0.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<()> {
    run_in(&root(), program, args)
}

/// [`run`] in another folder.
pub(crate) fn run_in(dir: &std::path::Path, program: &str, args: &[&str]) -> Result<()> {
    run_with(dir, &[], program, args)
}

/// [`run_in`] with extra environment variables.
pub(crate) fn run_with(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    program: &str,
    args: &[&str],
) -> Result<()> {
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    println!("$ {}{program} {}", shown.concat(), args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .status()
        .with_context(|| format!("starting {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed with {status}", args.join(" "));
    }
    Ok(())
}

/// Runs a command quietly and returns its output, whatever the exit status.
pub(crate) fn output(program: &str, args: &[&str]) -> Result<Output> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {program}"))
}

/// True when the command runs and exits 0.
pub(crate) fn succeeds(program: &str, args: &[&str]) -> bool {
    output(program, args).is_ok_and(|o| o.status.success())
}

/// Text of stdout, trimmed.
pub(crate) fn stdout_text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Removes a build folder that nothing later needs; a missing folder is fine.
pub(crate) fn remove_dir(dir: &std::path::Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {
            println!("   removed {}", dir.display());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", dir.display())),
    }
}

/// Prints the free space where the build writes, so a run that fills the disk says where.
pub(crate) fn disk_report() {
    let dir = root();
    if let Ok(out) = Command::new("df").arg("-h").arg(&dir).output() {
        print!("== disk: {}", String::from_utf8_lossy(&out.stdout));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 34, item 16: `image proxy` and `dist` find the binary where cargo put it.
    #[test]
    fn the_target_folder_follows_cargo_target_dir() {
        assert_eq!(target_dir_from(None), root().join("target"));
        assert_eq!(target_dir_from(Some("".into())), root().join("target"));
        assert_eq!(
            target_dir_from(Some("/tmp/elsewhere".into())),
            PathBuf::from("/tmp/elsewhere")
        );
        assert_eq!(target_dir_from(Some("t2".into())), root().join("t2"));
    }
}

//! The release builds of what is shipped, as CI runs them: a child `xtask ci-release-builds`
//! at the lowest CPU priority, started after the set-up and waited for in two places.
//!
//! Four release builds of the tree (the abi3 wheel with zig's linker, README's
//! `cargo install --locked`, the static binary, the wheel from source) are most of CI's CPU
//! beside the tests, and none of them needs the tests: run at `nice -n 19` in target folders of
//! their own ([`cmd::ship_dir`]) they take only what the steps in front leave idle and hold
//! none of `target/`'s locks. The wheel comes first and says so with a marker file, so the
//! Python tests start as soon as it exists while the rest goes on beside them.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::ci::Clock;
use crate::{cmd, python, release};

/// The step after which the wheel is in `target/wheels/`.
pub(crate) const WHEEL: &str = "wheel";

/// The folder of the child's log and its steps' markers.
fn folder() -> PathBuf {
    cmd::target_dir().join("xtask/ci-release-builds")
}

/// The file a finished step leaves.
fn marker(step: &str) -> PathBuf {
    folder().join(format!("{step}.done"))
}

/// `xtask ci-release-builds`, the child [`ReleaseBuilds`] starts: the wheel (then its marker),
/// README's `cargo install --locked` (checked: version and size), the static binary (one
/// crate and a link beside that build), and `pip install ./crates/agentguard-python` into a
/// fresh venv (checked: an import and a refusal).
pub(crate) fn release_builds() -> Result<()> {
    stop_with_parent();
    std::fs::create_dir_all(folder())?;
    let mut clock = Clock::new();
    clock.step(WHEEL, || python::wheel().map(|_| ()))?;
    std::fs::write(marker(WHEEL), b"")?;
    clock.step("cargo install", release::install_check)?;
    clock.step("static binary", || release::static_binary().map(|_| ()))?;
    clock.step("python from source", python::from_source)?;
    clock.table();
    Ok(())
}

/// Ends this child and everything it started (its process group, which [`ReleaseBuilds`]
/// made for it) once CI is gone: a CI killed by a signal runs no `Drop`, and is seen here as
/// this process's parent changing (the orphan is adopted by init or a subreaper).
fn stop_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            if std::os::unix::process::parent_id() != parent {
                kill_group(std::process::id());
                std::process::exit(1);
            }
        }
    });
}

/// SIGTERM to the process group `leader` leads (the child and every build it started).
fn kill_group(leader: u32) {
    let group = format!("-{leader}");
    let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
}

/// The child running [`release_builds`] under `nice -n 19`, its output in a file (printed when
/// it is waited for), killed with its process group if CI stops first.
pub(crate) struct ReleaseBuilds {
    child: Child,
    log: PathBuf,
}

impl ReleaseBuilds {
    pub(crate) fn start() -> Result<Self> {
        let dir = folder();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("output.log");
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let exe = std::env::current_exe().context("finding this xtask's executable")?;
        let child = Command::new("nice")
            .args(["-n", "19"])
            .arg(exe)
            .arg("ci-release-builds")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .context("starting nice -n 19 xtask ci-release-builds")?;
        println!(
            "== ci: the release builds run beside the next steps at nice 19; their output: {}",
            log.display()
        );
        Ok(Self { child, log })
    }

    /// Waits until `step` has left its marker; fails, with the child's output, if the child
    /// ends without it.
    pub(crate) fn wait_for(&mut self, step: &str) -> Result<()> {
        println!("== ci: waiting for the release builds' {step}");
        loop {
            // The child's state is read before the marker, so a marker left just before the
            // end still counts.
            let ended = self.child.try_wait()?;
            if marker(step).exists() {
                return Ok(());
            }
            if let Some(status) = ended {
                self.print_log();
                bail!(
                    "the release builds ended ({status}) before their {step}; their output is above"
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits for the child to end, prints its output, and fails unless it succeeded.
    pub(crate) fn finish(mut self) -> Result<()> {
        println!("== ci: waiting for the release builds");
        let status = self
            .child
            .wait()
            .context("waiting for the release builds")?;
        self.print_log();
        if !status.success() {
            bail!("the release builds failed ({status}); their output is above");
        }
        Ok(())
    }

    fn print_log(&self) {
        let said = std::fs::read_to_string(&self.log).unwrap_or_default();
        print!("{said}");
    }
}

impl Drop for ReleaseBuilds {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            kill_group(self.child.id());
            let _ = self.child.wait();
        }
    }
}

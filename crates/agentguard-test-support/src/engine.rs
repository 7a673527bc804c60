//! A fake container engine CLI, for tests of everything around an engine without one.
//!
//! `FakeEngine::new()` writes `fake-engine.sh` as an executable named `docker` in a fresh
//! folder; `engine = "<that path>"` makes the executor drive it. Its `run` starts the
//! allowlisted argv as a plain child process (so a test command decides what "the container"
//! does: print, sleep, flood, exit 125 or 137), and `kill NAME` kills that child, so timeouts,
//! output caps, hung clients and engine exit statuses are tested as they really happen.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const SCRIPT: &str = include_str!("fake-engine.sh");

/// A fake `docker` in its own folder, removed on drop.
#[derive(Debug)]
pub struct FakeEngine {
    dir: tempfile::TempDir,
}

impl Default for FakeEngine {
    fn default() -> Self {
        FakeEngine::new()
    }
}

impl FakeEngine {
    /// While `yes`, the fake daemon refuses every `kill` and `rm` (the "container" runs on).
    pub fn fail_kills(&self, yes: bool) {
        let marker = self.dir.path().join("state").join("fail-kill");
        if yes {
            std::fs::create_dir_all(marker.parent().unwrap()).expect("the state folder");
            std::fs::write(&marker, "").expect("the fail-kill marker");
        } else {
            let _ = std::fs::remove_file(&marker);
        }
    }

    /// Writes the fake engine, named `docker`, into a new temporary folder.
    pub fn new() -> FakeEngine {
        FakeEngine::named("docker")
    }

    /// The same fake, named `docker` or `podman` (which decides the argv dialect).
    pub fn named(program: &str) -> FakeEngine {
        let dir = tempfile::tempdir().expect("a temporary folder for the fake engine");
        std::fs::write(dir.path().join("program"), program).expect("record the program name");
        let path = dir.path().join(program);
        std::fs::write(&path, SCRIPT).expect("write the fake engine");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("make the fake engine executable");
        FakeEngine { dir }
    }

    /// The program to configure as the engine (its file name is `docker` or `podman`).
    pub fn path(&self) -> PathBuf {
        let program = std::fs::read_to_string(self.dir.path().join("program"))
            .unwrap_or_else(|_| "docker".into());
        self.dir.path().join(program)
    }

    fn lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("state").join(file))
            .map(|text| text.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Every call's arguments, one line per call, in order.
    pub fn calls(&self) -> Vec<String> {
        self.lines("calls")
    }

    /// `exited NAME STATUS` and `killed NAME` lines, in order.
    pub fn events(&self) -> Vec<String> {
        self.lines("events")
    }

    /// The names of "containers" whose process is still recorded as running.
    pub fn running(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.dir.path().join("state")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".pid").map(str::to_owned)
            })
            .collect()
    }

    /// The folder holding the engine and its state.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

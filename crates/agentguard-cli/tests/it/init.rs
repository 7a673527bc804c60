//! `agentguard init` (issue 38, item 3): each template loads and `--dry-run`s every command as
//! written, and a file that exists is never replaced without `--force`. And the first-hour
//! errors (item 5): a typo names the closest key, a parse error prints on several lines, a
//! missing config says how to give or make one.

use crate::{agentguard, stderr};

/// A workspace a read-write command may use: owned by nobody, as `workspace_mode = "rw"`
/// requires of a root caller (the container runs as the folder's owner).
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let _ = std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534));
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    dir
}

#[test]
fn init_writes_each_template_and_every_command_dry_runs() {
    for template in ["pytest", "npm", "cargo", "generic"] {
        let dir = workspace();
        let config = dir.path().join("agentguard.toml");
        let config = config.to_str().unwrap();
        let out = agentguard(&["init", "--template", template, "--config", config]);
        assert_eq!(out.status.code(), Some(0), "{template}: {}", stderr(&out));
        let text = std::fs::read_to_string(config).unwrap();
        let commands: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("[commands.")?.strip_suffix(']'))
            .filter(|name| !name.contains('.'))
            .collect();
        assert!(!commands.is_empty(), "{template}: {text}");
        for command in commands {
            let mut args = vec!["run", "--config", config, command, "--dry-run"];
            if command == "test_file" {
                args.push("path=tests/test_api.py");
            }
            let out = agentguard(&args);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{template} {command}: {}",
                stderr(&out)
            );
        }
        // Every key it sets is explained: no table without a comment above or in it.
        assert!(
            text.lines().filter(|l| l.starts_with('#')).count() >= 8,
            "{text}"
        );
        // Never replaced without --force; with it, replaced.
        std::fs::write(config, "# mine\n").unwrap();
        let out = agentguard(&["init", "--template", template, "--config", config]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
        assert_eq!(std::fs::read_to_string(config).unwrap(), "# mine\n");
        let out = agentguard(&[
            "init",
            "--template",
            template,
            "--config",
            config,
            "--force",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(std::fs::read_to_string(config).unwrap(), text);
    }
}

#[test]
fn config_errors_say_what_to_do_on_lines_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentguard.toml");
    let config_text = config.to_str().unwrap();
    std::fs::write(
        &config,
        "image = \"localhost/x:1\"\nengine = \"docker\"\ntimout = 5\n[commands]\nt = [\"true\"]\n",
    )
    .unwrap();
    let out = agentguard(&["run", "--config", config_text, "t", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("did you mean `timeout`?"), "{said}");
    assert!(!said.contains("\\u{a}"), "no escaped newlines: {said}");
    assert!(said.lines().any(|l| l.contains("3 | timout = 5")), "{said}");
    // A key inside a command's table, too.
    std::fs::write(
        &config,
        "image = \"localhost/x:1\"\nengine = \"docker\"\n[commands.t]\nargv = [\"true\"]\nworkspace_mod = \"rw\"\n",
    )
    .unwrap();
    let said = stderr(&agentguard(&[
        "run",
        "--config",
        config_text,
        "t",
        "--dry-run",
    ]));
    assert!(said.contains("did you mean `workspace_mode`?"), "{said}");
    // Nothing close: no guess.
    std::fs::write(
        &config,
        "image = \"localhost/x:1\"\nengine = \"docker\"\nzzzzzzzz = 1\n[commands]\nt = [\"true\"]\n",
    )
    .unwrap();
    let said = stderr(&agentguard(&[
        "run",
        "--config",
        config_text,
        "t",
        "--dry-run",
    ]));
    assert!(!said.contains("did you mean"), "{said}");
    // No config at all: how to give one, or make one.
    let missing = dir.path().join("none.toml");
    let out = agentguard(&["run", "--config", missing.to_str().unwrap(), "t"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    for needle in ["--config", "AGENTGUARD_CONFIG", "agentguard init"] {
        assert!(said.contains(needle), "{needle}: {said}");
    }
}

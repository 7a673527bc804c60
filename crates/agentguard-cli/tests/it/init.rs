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
    // What a dry run of `t` says on stderr, and its exit status, with `text` as the config.
    let said = |text: &str| {
        std::fs::write(&config, text).unwrap();
        let out = agentguard(&["run", "--config", config_text, "t", "--dry-run"]);
        (stderr(&out), out.status.code())
    };
    let (said_first, code) = said(
        "image = \"localhost/x:1\"\nengine = \"docker\"\ntimout = 5\n[commands]\nt = [\"true\"]\n",
    );
    assert_eq!(code, Some(2), "{said_first}");
    assert!(
        said_first.contains("did you mean `timeout`?"),
        "{said_first}"
    );
    assert!(
        !said_first.contains("\\u{a}"),
        "no escaped newlines: {said_first}"
    );
    assert!(
        said_first.lines().any(|l| l.contains("3 | timout = 5")),
        "{said_first}"
    );
    // A key inside a command's table, too.
    let (table, _) = said(
        "image = \"localhost/x:1\"\nengine = \"docker\"\n[commands.t]\nargv = [\"true\"]\nworkspace_mod = \"rw\"\n",
    );
    assert!(table.contains("did you mean `workspace_mode`?"), "{table}");
    // Nothing close: no guess.
    let (far, _) = said(
        "image = \"localhost/x:1\"\nengine = \"docker\"\nzzzzzzzz = 1\n[commands]\nt = [\"true\"]\n",
    );
    assert!(!far.contains("did you mean"), "{far}");
    // No config at all: how to give one, or make one.
    let missing = dir.path().join("none.toml");
    let out = agentguard(&["run", "--config", missing.to_str().unwrap(), "t"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    for needle in ["--config", "AGENTGUARD_CONFIG", "agentguard init"] {
        assert!(said.contains(needle), "{needle}: {said}");
    }
}

/// The schema `agentguard config schema` prints, compiled.
fn schema() -> (boon::Schemas, boon::SchemaIndex) {
    let out = agentguard(&["config", "schema"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        value["$schema"]
            .as_str()
            .is_some_and(|s| s.contains("2020-12")),
        "{value}"
    );
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.add_resource("agentguard.json", value).unwrap();
    let index = compiler.compile("agentguard.json", &mut schemas).unwrap();
    (schemas, index)
}

/// Every example config: the templates, and each full config (one with `image`) in
/// docs/config.md.
fn examples() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for name in ["pytest", "npm", "cargo", "generic"] {
        let path = root.join(format!("templates/{name}.toml"));
        out.push((name.to_owned(), std::fs::read_to_string(path).unwrap()));
    }
    let reference = std::fs::read_to_string(root.join("../../docs/config.md")).unwrap();
    for (n, block) in reference.split("```toml\n").skip(1).enumerate() {
        let block = block.split("```").next().unwrap_or_default();
        if block.lines().any(|l| l.starts_with("image = ")) {
            out.push((format!("docs/config.md block {n}"), block.to_owned()));
        }
    }
    assert!(out.len() >= 6, "the reference has full examples");
    out
}

#[test]
fn the_schema_accepts_every_example_and_refuses_a_wrong_type_or_an_unknown_key() {
    let (schemas, index) = schema();
    for (name, text) in examples() {
        let value: serde_json::Value = toml::from_str(&text).unwrap();
        if let Err(e) = schemas.validate(&value, index) {
            panic!("{name} does not validate: {e}");
        }
    }
    for (text, why) in [
        ("image = \"i\"\ntimeout = \"ten\"\n", "a string timeout"),
        ("image = \"i\"\ntimout = 10\n", "an unknown key"),
        ("timeout = 10\n", "no image"),
        (
            "image = \"i\"\n[commands.t]\nargv = [\"true\"]\nnetwork = 1\n",
            "a number network",
        ),
        (
            "image = \"i\"\n[commands]\nt = \"true\"\n",
            "a command as a string",
        ),
    ] {
        let value: serde_json::Value = toml::from_str(text).unwrap();
        assert!(schemas.validate(&value, index).is_err(), "{why}: {text}");
    }
}

/// The man page `cargo xtask dist` packs (issue 38, item 1): roff from the clap definitions,
/// naming every subcommand, and `man -l` renders it.
#[test]
fn the_man_page_names_every_subcommand_and_renders() {
    let out = agentguard(&["manpage"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH agentguard 1"), "{page}");
    // roff writes a hyphen as `\-`.
    let text = page.replace("\\-", "-");
    for subcommand in [
        "run",
        "init",
        "config",
        "policy",
        "audit",
        "mcp",
        "egress-proxy",
    ] {
        assert!(
            text.contains(&format!("agentguard-{subcommand}(1)")),
            "{subcommand} is not in the page"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentguard.1");
    std::fs::write(&file, &page).unwrap();
    match std::process::Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    {
        Ok(rendered) => {
            let text = String::from_utf8_lossy(&rendered.stdout);
            assert!(
                rendered.status.success(),
                "{}",
                String::from_utf8_lossy(&rendered.stderr)
            );
            assert!(
                text.contains("agentguard") && text.contains("SYNOPSIS"),
                "{text}"
            );
        }
        Err(e) => eprintln!("SKIPPED: rendering the man page: `man` is not here ({e})"),
    }
}

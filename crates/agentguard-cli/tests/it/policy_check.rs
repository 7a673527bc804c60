//! `agentguard policy check` (issue 40): a policy file against a floor and against the one it
//! replaces, without running anything: each entry beyond the floor or added is named, a
//! pattern under a wider one and a range under a union of ranges count as covered, and the
//! exit status says whether the change may go.

use std::process::Command;

use crate::{agentguard, stderr, stdout};

const FLOOR: &str = r#"allow = ["*.example.com"]
allow_ports = [443, 8443]
allow_cidrs = ["10.0.0.0/9", "10.128.0.0/9"]

[secrets]
token = { env = "EXAMPLE_TOKEN" }

[routes.api]
upstream = "https://api.example.com"
secret = "token"
header = "Authorization"
value = "Bearer {secret}"
methods = ["GET", "POST"]
"#;

const OLD: &str = "allow = [\"api.example.com\"]\n";

const NEW: &str = r#"allow = ["api.example.com", "*.files.example.com", "other.test"]
allow_ports = [443, 8080]
allow_cidrs = ["10.0.0.0/8"]

[secrets]
token = { env = "EXAMPLE_TOKEN" }

[routes.api]
upstream = "HTTPS://api.example.com/"
secret = "token"
header = "Authorization"
value = "Bearer {secret}"
methods = ["GET", "DELETE"]
"#;

fn files() -> (tempfile::TempDir, [String; 3]) {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for (name, text) in [("floor.toml", FLOOR), ("old.toml", OLD), ("new.toml", NEW)] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        paths.push(path.to_str().unwrap().to_owned());
    }
    (dir, paths.try_into().unwrap())
}

#[test]
fn a_policy_beyond_its_floor_is_refused_naming_each_entry() {
    let (_dir, [floor, old, new]) = files();
    let out = agentguard(&[
        "policy",
        "check",
        "--floor",
        &floor,
        "--against",
        &old,
        &new,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let beyond: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  beyond: "))
        .collect();
    // `*.files.example.com` is under the floor's `*.example.com`; 10.0.0.0/8 is the union of
    // the floor's two halves; the route's upstream is the same origin written otherwise.
    assert_eq!(
        beyond,
        [
            "allow \"other.test\"",
            "allow_ports 8080",
            "method DELETE on the route to https://api.example.com"
        ],
        "{text}"
    );
    let added: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  + "))
        .collect();
    assert_eq!(added.len(), 5, "{text}");
    assert!(added.contains(&"allow_cidrs \"10.0.0.0/8\""), "{text}");
    assert!(
        added.contains(&"a route to https://api.example.com"),
        "{text}"
    );
}

#[test]
fn a_narrowing_change_passes_and_says_what_it_removes() {
    let (_dir, [floor, old, new]) = files();
    // OLD within the floor, and against NEW: nothing added, what NEW had removed.
    let out = agentguard(&[
        "policy",
        "check",
        "--floor",
        &floor,
        "--against",
        &new,
        &old,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("within the floor "), "{text}");
    assert!(text.contains("0 added, 5 removed"), "{text}");
    assert!(text.contains("  - allow \"other.test\""), "{text}");
    // The floor from the environment, as every other command takes it.
    let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["policy", "check", &old])
        .env("AGENTGUARD_FLOOR", &floor)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("within the floor "));
}

#[test]
fn without_a_floor_or_an_old_policy_or_with_a_bad_file_it_is_a_usage_error() {
    let (dir, [floor, _, new]) = files();
    let out = agentguard(&["policy", "check", &new]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--floor FILE"), "{}", stderr(&out));
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "allow = [\"x.test\"]\n[egress]\nallow = []\n").unwrap();
    let out = agentguard(&["policy", "check", "--floor", &floor, bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown field `egress`"),
        "{}",
        stderr(&out)
    );
}

/// The floor at load (issue 40, item 2): a config granting anything beyond it is refused by
/// `run`, `mcp`, `k8s manifests` and `egress-proxy` before anything starts, each entry named,
/// whether the floor comes from `[egress] floor` or from `AGENTGUARD_FLOOR`; within it, the
/// same config loads.
#[test]
fn a_config_beyond_its_floor_is_refused_at_load_everywhere() {
    let (dir, [floor, _, _]) = files();
    let config = |allow: &str, extra: &str| {
        let path = dir
            .path()
            .join(format!("cfg-{}.toml", allow.len() + extra.len()));
        std::fs::write(
            &path,
            format!(
                "image = \"localhost/tools@sha256:{}\"\nnetwork = \"egress\"\n{extra}\n[egress]\nallow = [{allow}]\nfloor = \"floor.toml\"\n\n[commands]\nt = [\"true\"]\n",
                "a".repeat(64)
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_owned()
    };
    let wide = config("\"api.example.com\", \"other.test\"", "");
    let within = config("\"api.example.com\"", "");
    let needle = "grants what the floor";
    for args in [
        vec!["run", "--config", &wide, "t", "--dry-run"],
        vec!["mcp", "--config", &wide],
        vec!["tools", "--config", &wide],
    ] {
        let out = agentguard(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("[egress] floor")
                && said.contains(needle)
                && said.contains("allow \"other.test\""),
            "{args:?}: {said}"
        );
    }
    let out = agentguard(&["run", "--config", &within, "t", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The operator's floor from the environment applies to a config that names none.
    let unbounded = dir.path().join("unbounded.toml");
    std::fs::write(
        &unbounded,
        std::fs::read_to_string(&within)
            .unwrap()
            .replace("floor = \"floor.toml\"\n", "")
            .replace("allow = [\"api.example.com\"]", "allow = [\"other.test\"]"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args([
            "run",
            "--config",
            unbounded.to_str().unwrap(),
            "t",
            "--dry-run",
        ])
        .env("AGENTGUARD_FLOOR", &floor)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("AGENTGUARD_FLOOR"),
        "{}",
        stderr(&out)
    );
    // A cluster config is loaded the same way.
    let cluster = config(
        "\"other.test\"",
        &format!(
            "engine = \"kubernetes\"\n[kubernetes]\nnamespace = \"agentguard\"\nproxy_image = \"localhost/agentguard@sha256:{}\"\naccept_weakened = [\"tmp_noexec\", \"pids\"]\n",
            "b".repeat(64)
        ),
    );
    let out = agentguard(&["k8s", "manifests", "--config", &cluster, "t"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(needle), "{}", stderr(&out));
    // The shared proxy started with flags.
    let out = agentguard(&[
        "egress-proxy",
        "--allow",
        "other.test",
        "--allow-port",
        "8080",
        "--floor",
        &floor,
        "--port",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("allow \"other.test\"") && said.contains("allow_ports 8080"),
        "{said}"
    );
}

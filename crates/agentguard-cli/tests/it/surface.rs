//! The command-line surface: every DESIGN.md subcommand and flag exists.

use crate::{agentguard, stderr, stdout};

#[test]
fn help_lists_every_subcommand_of_the_contract() {
    let help = stdout(&agentguard(&["--help"]));
    for sub in [
        "run",
        "egress-proxy",
        "fetch",
        "classify",
        "audit",
        "doctor",
        "gc",
        "completions",
    ] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(sub)),
            "`{sub}` missing from --help:\n{help}"
        );
    }
    let audit = stdout(&agentguard(&["audit", "--help"]));
    assert!(
        audit.contains("verify") && audit.contains("show"),
        "{audit}"
    );
}

#[test]
fn flags_of_the_contract_are_accepted() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["run", "--help"], &["--config", "--json", "--dry-run"]),
        (
            &["egress-proxy", "--help"],
            &[
                "--allow",
                "--allow-port",
                "--bind",
                "--port",
                "--audit",
                "--nameserver",
                "--allow-cidr",
                "--max-connections",
                "--connect-timeout",
                "--idle-timeout",
            ],
        ),
        (
            &["fetch", "--help"],
            &[
                "--allow",
                "--allow-port",
                "--max-bytes",
                "--ca-file",
                "--nameserver",
                "--allow-cidr",
                "--audit",
                "--json",
            ],
        ),
        (&["audit", "verify", "--help"], &["--key-env"]),
        (
            &["audit", "show", "--help"],
            &["--decision", "--kind", "--json"],
        ),
        (&["gc", "--help"], &["--dry-run"]),
    ];
    for (args, flags) in cases {
        let help = stdout(&agentguard(args));
        for flag in *flags {
            assert!(help.contains(flag), "{args:?}: {flag} missing");
        }
    }
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(agentguard(&["no-such-command"]).status.code(), Some(2));
    assert_eq!(
        agentguard(&["classify", "--no-such-flag", "1.1.1.1"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn version_and_completions() {
    let version = stdout(&agentguard(&["--version"]));
    assert_eq!(
        version.trim(),
        format!("agentguard {}", env!("CARGO_PKG_VERSION"))
    );
    let bash = agentguard(&["completions", "bash"]);
    assert_eq!(bash.status.code(), Some(0));
    assert!(stdout(&bash).contains("egress-proxy"));
}

#[test]
fn diagnostics_go_to_stderr_and_follow_the_verbosity() {
    let quiet = agentguard(&["classify", "10.0.0.1"]);
    assert_eq!(stderr(&quiet), "", "no diagnostics by default");
    let verbose = agentguard(&["-vv", "classify", "10.0.0.1"]);
    assert_eq!(
        stdout(&verbose),
        "10.0.0.1\tnon-public\tprivate-use\n",
        "data only on stdout"
    );
    assert!(
        stderr(&verbose).contains("classified"),
        "{}",
        stderr(&verbose)
    );
    let filtered = std::process::Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(["classify", "10.0.0.1"])
        .env("AGENTGUARD_LOG", "agentguard=debug")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&filtered.stderr).contains("classified"),
        "AGENTGUARD_LOG enables diagnostics"
    );
}

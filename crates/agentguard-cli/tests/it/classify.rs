//! `agentguard classify`: the exact line format, JSON, and refusals.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::{agentguard, stderr, stdout};

#[test]
fn the_issue_example_names_every_range() {
    let out = agentguard(&[
        "classify",
        "10.0.0.1",
        "8.8.8.8",
        "::ffff:127.0.0.1",
        "64:ff9b::808:808",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "10.0.0.1\tnon-public\tprivate-use\n\
         8.8.8.8\tpublic\n\
         ::ffff:127.0.0.1\tnon-public\tloopback\n\
         64:ff9b::808:808\tnon-public\tipv4-ipv6 translation (nat64)\n"
    );
    assert_eq!(stderr(&out), "");
}

#[test]
fn url_literal_forms_are_read_as_addresses_and_printed_as_given() {
    let out = agentguard(&[
        "classify",
        "2130706433",
        "0177.0.0.1",
        "0x7f.1",
        "[::1]",
        "100.64.0.1",
        "2002:7f00:1::",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "2130706433\tnon-public\tloopback\n\
         0177.0.0.1\tnon-public\tloopback\n\
         0x7f.1\tnon-public\tloopback\n\
         [::1]\tnon-public\tloopback address\n\
         100.64.0.1\tnon-public\tshared address space\n\
         2002:7f00:1::\tnon-public\t6to4\n"
    );
}

#[test]
fn json_is_one_object_per_line() {
    let out = agentguard(&["classify", "--json", "::ffff:127.0.0.1", "8.8.8.8"]);
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["address"], "::ffff:127.0.0.1");
    assert_eq!(lines[0]["class"], "non-public");
    assert_eq!(lines[0]["range"], "loopback");
    assert_eq!(lines[0]["cidr"], "127.0.0.0/8");
    assert_eq!(lines[0]["ipv4_mapped"], "127.0.0.1");
    assert_eq!(lines[1]["class"], "public");
    assert!(lines[1].get("range").is_none());
}

#[test]
fn a_name_is_refused_with_exit_2_and_nothing_printed() {
    let out = agentguard(&["classify", "8.8.8.8", "pkgs.example.com"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stdout(&out),
        "",
        "nothing is printed when one argument is bad"
    );
    let err = stderr(&out);
    assert!(
        err.contains("\"pkgs.example.com\" is not an IP address"),
        "{err}"
    );
    assert!(err.contains("never resolves"), "{err}");
}

#[test]
fn malformed_arguments_are_named() {
    for bad in ["1.2.3.4.5", "::1%lo", "a b", "999.1.1.1", ""] {
        let out = agentguard(&["classify", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(
            stderr(&out).contains(&format!("{bad:?}")),
            "{bad:?} not named: {}",
            stderr(&out)
        );
    }
    let none = agentguard(&["classify"]);
    assert_eq!(none.status.code(), Some(2), "no argument is a usage error");
}

#[test]
fn a_closed_pipe_ends_quietly_with_success() {
    // Far more output than a pipe buffer holds, and a reader that closes at once: the writer
    // must meet EPIPE, and that is not an error for a command-line tool.
    let args: Vec<String> = (0..20_000)
        .map(|i| format!("10.0.{}.{}", i / 256 % 256, i % 256))
        .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .arg("classify")
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert_eq!(err, "");
}

//! Checks over the Rust source text: every file says why it exists, the policy crate does no
//! I/O, only the container crate spawns processes, and no file or function grows past the
//! size a reader can hold (400 lines a file, 80 a function, outside tests).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::rel;

/// The longest source file outside tests and golden data.
const MAX_FILE_LINES: usize = 400;
/// The longest function outside tests.
const MAX_FN_LINES: usize = 80;

/// True for test code: integration tests, `tests.rs` unit-test files, the e2e crate.
pub(super) fn is_test(name: &str) -> bool {
    name.starts_with("tests/")
        || name.contains("/tests/")
        || name.ends_with("/tests.rs")
        || name.starts_with("fuzz/")
}

pub(super) fn check(root: &Path, files: &[PathBuf], problems: &mut Vec<String>) -> Result<()> {
    for file in files {
        let name = rel(root, file);
        let text = fs::read_to_string(file)?;
        if !text.starts_with("//!") {
            problems.push(format!(
                "{name}: the first line must be a `//!` comment saying what the module does and why"
            ));
        }
        let pure = name.starts_with("crates/agentguard-policy/")
            || (name.starts_with("crates/agentguard-k8s/src/") && !name.ends_with("/tests.rs"));
        if pure {
            for banned in [
                "std::fs",
                "std::process",
                "std::env",
                "TcpStream",
                "TcpListener",
                "UdpSocket",
                "ToSocketAddrs",
                "tokio",
                "File::",
            ] {
                if text.contains(banned) {
                    problems.push(format!(
                        "{name}: the policy crate and the manifest compiler do no I/O, but mention `{banned}`"
                    ));
                }
            }
        }
        // Benchmark programs in examples/ start the real binary and peers, like tests do.
        // The relay execs the allowlisted command inside the container; the sandbox's build
        // script compiles the relay. The kubectl crate is the container crate's counterpart for
        // a cluster.
        let may_spawn = name.starts_with("crates/agentguard-container/")
            || name.starts_with("crates/agentguard-kubectl/")
            || name.starts_with("crates/agentguard-test-support/")
            || name.starts_with("crates/agentguard-relay/")
            || name == "crates/agentguard-sandbox/build.rs"
            || name.starts_with("xtask/")
            || name.contains("/examples/")
            || is_test(&name);
        if !may_spawn && text.contains(&["Command", "::new("].concat()) {
            problems.push(format!(
                "{name}: only agentguard-container, agentguard-kubectl and the relay (and xtask, tests, benchmark examples, the relay's build script) may spawn processes; test-support's fixtures do too"
            ));
        }
        if !is_test(&name) {
            sizes(&name, &text, problems);
        }
    }
    Ok(())
}

/// File and function lengths. A function starts at a line whose code begins with `fn` (after
/// `pub`, `async`, `const`, `unsafe` qualifiers) and ends at the first later line with the same
/// indentation that is `}`: rustfmt's layout.
fn sizes(name: &str, text: &str, problems: &mut Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() > MAX_FILE_LINES {
        problems.push(format!(
            "{name}: {} lines; split it by job (at most {MAX_FILE_LINES} outside tests)",
            lines.len()
        ));
    }
    let mut in_tests = false;
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            // Unit tests at the end of a file are tests too.
            in_tests = true;
        }
        if in_tests || !starts_fn(code) {
            continue;
        }
        let indent = &line[..line.len() - code.len()];
        let end = lines[i + 1..]
            .iter()
            .position(|l| l.strip_prefix(indent) == Some("}"));
        if let Some(end) = end
            && end + 2 > MAX_FN_LINES
        {
            let fn_name = code
                .split("fn ")
                .nth(1)
                .and_then(|rest| rest.split(['(', '<']).next())
                .unwrap_or("?");
            problems.push(format!(
                "{name}:{}: fn {fn_name} is {} lines; at most {MAX_FN_LINES}",
                i + 1,
                end + 2
            ));
        }
    }
}

fn starts_fn(code: &str) -> bool {
    let mut rest = code;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("pub") {
            rest = after
                .strip_prefix("(crate)")
                .or_else(|| after.strip_prefix("(super)"))
                .unwrap_or(after);
            continue;
        }
        match ["async ", "const ", "unsafe ", "extern \"C\" "]
            .iter()
            .find_map(|q| rest.strip_prefix(q))
        {
            Some(after) => rest = after,
            None => return rest.starts_with("fn "),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn functions_are_measured_from_fn_to_the_closing_brace() {
        let long = format!("//! x\nfn long() {{\n{}}}\n", "    x();\n".repeat(90));
        let mut problems = Vec::new();
        super::sizes("a.rs", &long, &mut problems);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("fn long is 92 lines"), "{problems:?}");
        let short = "//! x\npub(crate) async fn short() {\n    x();\n}\n";
        let mut problems = Vec::new();
        super::sizes("a.rs", short, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
    }
}

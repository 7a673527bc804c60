//! Checks that the tables in docs/ say what the code does: the policy's reason codes, the
//! param rules,
//! proxy's statuses and reason codes, the fetcher's reason codes, the exit codes, and the
//! audit keys (and that every key the source writes is in the key table).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use agentguard_audit::{KEYS, ValueType};
use agentguard_egress::RefusalKind;
use agentguard_netpin::FetchError;
use agentguard_policy::{Reason, Rule};
use anyhow::{Context, Result};

use super::{rel, source::is_test};

pub(super) fn check(root: &Path, files: &[PathBuf], problems: &mut Vec<String>) -> Result<()> {
    let doc = |name: &str| {
        fs::read_to_string(root.join("docs").join(name)).with_context(|| format!("docs/{name}"))
    };
    let policy_codes: BTreeSet<String> = Reason::ALL.iter().map(|r| r.code().into()).collect();

    let policy = doc("policy.md")?;
    compare(
        "docs/policy.md reason codes",
        &codes(&table(&policy, "| code | meaning |"), 0),
        &policy_codes,
        problems,
    );

    let params = doc("params.md")?;
    let rules: BTreeSet<String> = Rule::ALL.iter().map(|r| r.code().into()).collect();
    compare(
        "docs/params.md rules",
        &codes(&table(&params, "| rule | refuses |"), 0),
        &rules,
        problems,
    );

    let egress = doc("egress.md")?;
    let rows: BTreeSet<String> = table(&egress, "| status | reason | when |")
        .iter()
        .map(|cells| format!("{} {}", cells[0], cells[1].trim_matches('`')))
        .collect();
    let kinds: BTreeSet<String> = RefusalKind::ALL
        .iter()
        .map(|k| format!("{} {}", k.status(), k.code()))
        .collect();
    compare("docs/egress.md statuses", &rows, &kinds, problems);

    routes(&doc("routes.md")?, problems);
    let config = codes(
        &table(&doc("config.md")?, "| key | type | default | meaning |"),
        0,
    );
    let loaded = super::config_keys::keys(&agentguard_config::schema());
    compare("docs/config.md keys", &config, &loaded, problems);
    mcp_fetch_codes(&doc("mcp.md")?, &policy_codes, problems);

    let netpin = doc("netpin.md")?;
    let documented = codes(&table(&netpin, "| code | meaning |"), 0);
    let fetch: BTreeSet<String> = FetchError::REASONS.iter().map(|c| (*c).into()).collect();
    for code in &documented {
        if !fetch.contains(code) && !policy_codes.contains(code) {
            problems.push(format!(
                "docs/netpin.md: `{code}` is documented but no fetch reports it"
            ));
        }
    }
    for code in fetch.difference(&documented) {
        problems.push(format!(
            "docs/netpin.md: a fetch reports `{code}` but the table does not list it"
        ));
    }

    let exit_rs = fs::read_to_string(root.join("crates/agentguard-cli/src/exit.rs"))?;
    let constants: BTreeSet<String> = exit_rs
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub(crate) const "))
        .filter_map(|rest| rest.split_once(": u8 = "))
        .map(|(name, value)| format!("{} {name}", value.trim_end_matches(';')))
        .collect();
    let architecture = doc("ARCHITECTURE.md")?;
    let rows: BTreeSet<String> = table(&architecture, "| exit code | constant | meaning |")
        .iter()
        .map(|cells| format!("{} {}", cells[0], cells[1].trim_matches('`')))
        .collect();
    compare(
        "docs/ARCHITECTURE.md exit codes",
        &rows,
        &constants,
        problems,
    );

    keys(root, files, &doc("audit.md")?, problems)
}

/// The audit key table, and the keys the source writes.
/// The `fetch` tool's reason codes docs/mcp.md names are codes a fetch reports.
fn mcp_fetch_codes(mcp: &str, policy: &BTreeSet<String>, problems: &mut Vec<String>) {
    let Some(row) = mcp.lines().find(|l| l.starts_with("| `reason` |")) else {
        problems.push("docs/mcp.md: no `reason` row in the result table".into());
        return;
    };
    let Some((_, fetch)) = row.split_once("for `fetch`") else {
        problems.push("docs/mcp.md: the `reason` row does not list the fetch codes".into());
        return;
    };
    let known: BTreeSet<&str> = FetchError::REASONS.iter().copied().collect();
    for code in fetch.split('`').skip(1).step_by(2) {
        if !known.contains(code) && !policy.contains(code) {
            problems.push(format!(
                "docs/mcp.md: `{code}` is named as a fetch reason but no fetch reports it"
            ));
        }
    }
}

/// The headers docs/routes.md says a route drops are the ones `route_headers.rs` drops.
fn routes(routes: &str, problems: &mut Vec<String>) {
    let rows: BTreeSet<String> = table(routes, "| header | direction | why |")
        .iter()
        .map(|cells| format!("{} {}", cells[1], cells[0].trim_matches('`')))
        .collect();
    let dropped: BTreeSet<String> = agentguard_egress::DROPPED_REQUEST_HEADERS
        .iter()
        .map(|h| format!("request {h}"))
        .chain(
            agentguard_egress::DROPPED_RESPONSE_HEADERS
                .iter()
                .map(|h| format!("response {h}")),
        )
        .collect();
    compare("docs/routes.md dropped headers", &rows, &dropped, problems);
}

fn keys(root: &Path, files: &[PathBuf], audit: &str, problems: &mut Vec<String>) -> Result<()> {
    let type_name = |t: ValueType| match t {
        ValueType::String => "string",
        ValueType::Number => "number",
        ValueType::Bool => "boolean",
        ValueType::NumberOrNull => "number or null",
        ValueType::Strings => "array of strings",
        ValueType::Params => "object of strings and numbers",
    };
    let rows: BTreeSet<String> = table(audit, "| key | type | written by |")
        .iter()
        .map(|cells| format!("{} {}", cells[0].trim_matches('`'), cells[1]))
        .collect();
    let table_keys: BTreeSet<String> = KEYS
        .iter()
        .map(|(key, t)| format!("{key} {}", type_name(*t)))
        .collect();
    compare("docs/audit.md keys", &rows, &table_keys, problems);
    for file in files {
        let name = rel(root, file);
        if is_test(&name) || name.starts_with("xtask/") || name.contains("/examples/") {
            continue;
        }
        let text = fs::read_to_string(file)?;
        for marker in [".data(\"", ".subject(\""] {
            for piece in text.split(marker).skip(1) {
                let key = piece.split('"').next().unwrap_or_default();
                if !KEYS.iter().any(|(known, _)| *known == key) {
                    problems.push(format!(
                        "{name}: audit key `{key}` is not in agentguard_audit::KEYS (give it one type there and in docs/audit.md)"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Reports what one side has and the other lacks.
fn compare(
    what: &str,
    documented: &BTreeSet<String>,
    code: &BTreeSet<String>,
    problems: &mut Vec<String>,
) {
    for missing in code.difference(documented) {
        problems.push(format!(
            "{what}: `{missing}` is in the code but not in the docs"
        ));
    }
    for extra in documented.difference(code) {
        problems.push(format!(
            "{what}: `{extra}` is in the docs but not in the code"
        ));
    }
}

/// The backticked codes in one column of a table (a cell may list several).
fn codes(rows: &[Vec<String>], column: usize) -> BTreeSet<String> {
    rows.iter()
        .filter_map(|cells| cells.get(column))
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The cells of each row of the Markdown table whose header line starts with `header`.
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn tables_are_read_row_by_row() {
        let text =
            "x\n| code | meaning |\n| --- | --- |\n| `a`, `b` | one |\n| `c` | two |\n\nafter\n";
        let rows = super::table(text, "| code | meaning |");
        assert_eq!(rows.len(), 2);
        let codes = super::codes(&rows, 0);
        assert_eq!(codes.into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
    }
}

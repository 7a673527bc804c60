//! `verify` and `read`: the audit crate's streaming verifier over a log file.

use std::io::BufReader;
use std::path::PathBuf;

use agentguard_audit::{Key, Reader};
use pyo3::prelude::*;

use crate::errors;

/// What `verify` established: `(events, head, next_seq, signed, signatures_checked,
/// good_bytes, problem)`, `problem` as `(line, message)` for the first bad line.
type Verified = (u64, String, u64, bool, bool, u64, Option<(u64, String)>);

fn open(
    py: Python<'_>,
    path: &std::path::Path,
    key: Option<Vec<u8>>,
) -> PyResult<Reader<BufReader<std::fs::File>>> {
    let key = key
        .map(Key::new)
        .transpose()
        .map_err(|e| errors::raise(py, "ConfigError", format!("key: {e}"), "invalid_config"))?;
    let file = agentguard_audit::open_regular(path).map_err(|e| {
        errors::raise(
            py,
            "AgentGuardError",
            format!("reading the audit log {}: {e}", path.display()),
            "audit_unreadable",
        )
    })?;
    Ok(Reader::new(BufReader::new(file), key))
}

/// Verifies the log at `path` (its HMACs too, with `key`), line by line with the thread
/// detached; stops at the first bad line.
#[pyfunction]
#[pyo3(signature = (path, key=None))]
pub(crate) fn verify(py: Python<'_>, path: PathBuf, key: Option<Vec<u8>>) -> PyResult<Verified> {
    let reader = open(py, &path, key)?;
    Ok(py.detach(move || {
        let mut reader = reader;
        let mut problem = None;
        for item in reader.by_ref() {
            if let Err(p) = item {
                problem = Some((p.line, p.to_string()));
                break;
            }
        }
        let s = reader.summary().clone();
        (
            s.events,
            s.head,
            s.next_seq,
            s.signed,
            s.signatures_checked,
            s.good_bytes,
            problem,
        )
    }))
}

/// The records of the log at `path` as JSON lines, each verified; the first bad line raises
/// `AuditError`, naming the line and why (nothing after it is returned).
#[pyfunction]
#[pyo3(signature = (path, key=None))]
pub(crate) fn read(py: Python<'_>, path: PathBuf, key: Option<Vec<u8>>) -> PyResult<Vec<String>> {
    let reader = open(py, &path, key)?;
    let read = py.detach(move || {
        let mut records = Vec::new();
        for item in reader {
            match item {
                Ok(record) => records.push(serde_json::to_string(&record).unwrap_or_default()),
                Err(problem) => return Err(problem.to_string()),
            }
        }
        Ok(records)
    });
    read.map_err(|message| {
        errors::raise(
            py,
            "AuditError",
            format!("{}: {message}", path.display()),
            "audit_invalid",
        )
    })
}

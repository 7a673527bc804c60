//! Opening the audit log every writing subcommand records to, signed when asked.
//!
//! `run` (`[audit] key_env`), `fetch` and `egress-proxy` (`--audit-key-env`) and the audit
//! subcommands (`--key-env`) read the HMAC key the same way: the bytes of an environment
//! variable, so the key never appears in the process list; a missing or short key is a usage
//! error that names the flag and the variable.

use std::path::Path;

use agentguard_audit::{AuditLog, Durability, Key, LogOptions};

use crate::error::{ConfigError, KeyError};

/// The HMAC key in the environment variable `var`, named by `flag` in errors.
pub fn key_from_env(flag: &str, var: Option<&str>) -> Result<Option<Key>, ConfigError> {
    let Some(var) = var else { return Ok(None) };
    let value = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ConfigError::Invalid(KeyError::new(format!("{flag} {var}"), format!("the environment variable {var} is not set or empty; export the log's HMAC key in it"))))?;
    Key::new(value.into_encoded_bytes())
        .map(Some)
        .map_err(|e| ConfigError::Invalid(KeyError::new(format!("{flag} {var}"), e.to_string())))
}

/// Opens (or creates) the log at `path` with `durability`, signed with the key in
/// `key_env` when given.
pub fn open_log(
    path: &Path,
    durability: Durability,
    flag: &str,
    key_env: Option<&str>,
) -> anyhow::Result<AuditLog> {
    let options = LogOptions {
        key: key_from_env(flag, key_env)?,
        ..LogOptions::with_durability(durability)
    };
    Ok(AuditLog::open(path, options)?)
}

/// The log of a config's `[audit]` table, for runs (`run` and `mcp`): a run is rare and worth
/// a sync, so fsync durability (docs/audit.md).
pub fn runs_log(
    audit: Option<&crate::AuditConfig>,
) -> anyhow::Result<Option<std::sync::Arc<dyn agentguard_audit::AuditSink>>> {
    let Some(audit) = audit else {
        return Ok(None);
    };
    let log = open_log(
        &audit.path,
        Durability::Fsync,
        "[audit] key_env",
        audit.key_env.as_deref(),
    )?;
    Ok(Some(std::sync::Arc::new(log)))
}

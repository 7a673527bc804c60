//! The Python package's configuration: its keyword arguments as one JSON object with the
//! config file's keys, with errors that name the key path, and a `config_sha256` of the
//! object's canonical form (keys sorted, no whitespace), so equal arguments give one digest.

use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::{File, RunConfig, from_file, hint};

/// The configuration in `json`, one JSON object with the config file's keys and values (what
/// the Python package builds from its keyword arguments). Errors name the key path
/// (`commands.run_tests.params.n`) after `origin` (the name shown, such as
/// `ContainerExecutor`); relative paths are relative to `base`. Its `config_sha256` is the
/// SHA-256 of the object's canonical form (keys sorted, no whitespace).
pub fn from_json(json: &str, origin: &str, base: &Path) -> anyhow::Result<RunConfig> {
    let mut de = serde_json::Deserializer::from_str(json);
    let file: File = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let key = e.path().to_string();
        // serde_json's position in the generated JSON means nothing to the caller; the key
        // path says where.
        let inner = e.into_inner();
        let mut message = inner.to_string();
        let position = format!(" at line {} column {}", inner.line(), inner.column());
        if let Some(cut) = message.strip_suffix(&position) {
            message = cut.to_owned();
        }
        let message = hint::with_hint(message);
        ConfigError::Parse {
            path: PathBuf::from(origin),
            message: if key == "." {
                message
            } else {
                format!("{key}: {message}")
            },
        }
    })?;
    // It parsed as a File, so it is JSON: the digest is of its canonical form.
    let value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let digest = agentguard_audit::canonical_sha256(&value);
    from_file(file, Path::new(origin), base, digest)
}

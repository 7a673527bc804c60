//! `ConfigError`: what is wrong with a configuration, naming the key (a usage error).

use std::path::PathBuf;

/// The file could not be read or is not a valid configuration (a usage error).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading the config file {path}", path = path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// There is no file at `path`.
    #[error("no config file {path}: pass --config FILE, set AGENTGUARD_CONFIG, or write a starter one with `agentguard init`", path = path.display())]
    Missing {
        /// The file looked for.
        path: PathBuf,
    },
    /// A key or a value is not accepted; `message` names the key.
    #[error("{path}: {message}", path = path.display())]
    Parse {
        /// The file (or the name of the caller, such as `ContainerExecutor`).
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// The workspace folder cannot be used.
    #[error("workspace {path} (relative paths are relative to the config file)", path = path.display())]
    Workspace {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A value, or a combination of values, is not accepted at one key.
    #[error("{path}: {error}", path = path.display())]
    Key {
        /// The file (or the name of the caller, such as `ContainerExecutor`).
        path: PathBuf,
        /// The key and what is wrong with it.
        error: KeyError,
    },
    /// A combination of keys is not accepted, found after the file was loaded (a route's
    /// secret read at run time, a cluster grant).
    #[error("{0}")]
    Invalid(KeyError),
    /// The container crate refused a value (its error names the field and the value).
    #[error("in {path}", path = path.display())]
    Spec {
        /// The file (or the caller's name).
        path: PathBuf,
        /// The container crate's error.
        #[source]
        source: agentguard_container::Error,
    },
}

/// What is wrong at one key of a configuration, and what to do: the key path as written in
/// the file (`commands.install.egress_allow`, `[egress] allow_ports`, `routes.gh.env`) and
/// the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct KeyError {
    /// The key path.
    pub key: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl KeyError {
    /// The error `message` at `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> KeyError {
        KeyError {
            key: key.into(),
            message: message.into(),
        }
    }
}

//! Error types for agentguard-container.

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can be wrong when building a container specification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A field has a value the executor refuses; the message names the field and the value.
    #[error("invalid `{field}` value {value:?}: {reason}")]
    Invalid {
        /// The configuration key (`memory`, `user`, ...).
        field: &'static str,
        /// The value exactly as given.
        value: String,
        /// What is wrong and what to write instead.
        reason: String,
    },
    /// The command allowlist is invalid.
    #[error(transparent)]
    Policy(#[from] agentguard_policy::Error),
}

pub(crate) fn invalid(
    field: &'static str,
    value: impl Into<String>,
    reason: impl Into<String>,
) -> Error {
    Error::Invalid {
        field,
        value: value.into(),
        reason: reason.into(),
    }
}

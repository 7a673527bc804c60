//! Why a run cannot be compiled or carried out on the cluster.

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a run cannot be compiled or carried out on the cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value Kubernetes would not accept.
    #[error("`{field}` value {value:?}: {why}")]
    Invalid {
        /// The config key.
        field: &'static str,
        /// The value.
        value: String,
        /// Why, and what to write.
        why: String,
    },
    /// A seed default that cannot be kept on Kubernetes and that the config does not accept
    /// to weaken.
    #[error("{0}")]
    Unsupported(String),
    /// A generated object could not be written as JSON (a bug in the compiler).
    #[error("generated {kind} could not be written: {why}")]
    Serialize {
        /// The object kind.
        kind: &'static str,
        /// Why.
        why: String,
    },
}

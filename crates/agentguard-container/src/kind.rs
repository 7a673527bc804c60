//! The engine family (Docker or Podman), which decides the argv dialect: at the bottom, so
//! errors can name it.

use std::fmt;

/// The engine family, which decides the argv dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// The Docker CLI (`docker`).
    Docker,
    /// The Podman CLI (`podman`).
    Podman,
}

impl EngineKind {
    /// The conventional program name.
    pub fn program_name(self) -> &'static str {
        match self {
            EngineKind::Docker => "docker",
            EngineKind::Podman => "podman",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.program_name())
    }
}

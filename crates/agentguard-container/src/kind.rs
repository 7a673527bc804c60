//! The engine family (Docker, Podman, or an OCI runtime called directly), which decides the argv dialect: at the bottom, so
//! errors can name it.

use std::fmt;

/// The engine family, which decides the argv dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// The Docker CLI (`docker`).
    Docker,
    /// The Podman CLI (`podman`).
    Podman,
    /// No daemon: an OCI runtime (`runc`, `runsc`) called directly with a bundle agentguard
    /// writes (`engine = "oci"`).
    Oci,
}

impl EngineKind {
    /// The conventional program name.
    pub fn program_name(self) -> &'static str {
        match self {
            EngineKind::Docker => "docker",
            EngineKind::Podman => "podman",
            EngineKind::Oci => "oci",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.program_name())
    }
}

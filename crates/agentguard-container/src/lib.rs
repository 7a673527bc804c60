//! Hardened container launch: allowlisted commands in Docker or Podman, optionally under
//! gVisor (`runsc`), with every hardening default on.
//!
//! The agent picks a command NAME; a fixed map gives the argv. The spec ([`ContainerSpec`])
//! validates every value at build time, and [`ContainerSpec::invocation`] turns a NAME into
//! the complete engine argv as pure data, so the hardening is testable without an engine and
//! visible with `--dry-run`. Running the invocation (timeouts, output caps, kill by name,
//! crash sweeping) is the subject of the containers issue and is not written yet.

#![warn(missing_docs)]

mod argv;
mod engine;
mod error;
mod spec;

pub use argv::{Invocation, RunIdentity, WORKSPACE_TARGET};
pub use engine::{Engine, EngineKind};
pub use error::{Error, Result};
pub use spec::{ContainerSpec, ContainerSpecBuilder, WorkspaceMode};

#[cfg(test)]
mod tests;

//! Hardened container launch: allowlisted commands in Docker or Podman, optionally under
//! gVisor (`runsc`), with every hardening default on.
//!
//! The agent picks a command NAME; a fixed map gives the argv. The spec ([`ContainerSpec`])
//! validates every value at build time, and [`ContainerSpec::invocation`] turns a NAME into
//! the complete engine argv as pure data, so the hardening is testable without an engine and
//! visible with `--dry-run`. [`ContainerExecutor`] runs it: cleaned engine environment, output
//! caps, timeouts and overflows that kill the container by name, typed engine errors, audit.

#![warn(missing_docs)]

mod argv;
pub mod doctor;
mod engine;
mod error;
pub mod gc;
mod run;
mod spec;

pub use argv::{Invocation, RunIdentity, WORKSPACE_TARGET};
pub use engine::{Engine, EngineKind};
pub use error::{Error, Result};
pub use run::{
    ContainerExecutor, LABEL_DEADLINE, LABEL_OWNER, LABEL_OWNER_START, RunError, RunResult,
    RunStatus,
};
pub use spec::{ContainerSpec, ContainerSpecBuilder, ImagePin, WorkspaceMode};

#[cfg(test)]
mod tests;

//! Hardened container launch: allowlisted commands in Docker or Podman, optionally under
//! gVisor (`runsc`), with every hardening default on.
//!
//! The agent picks a command NAME, and fills the typed params the operator declared; a fixed
//! map gives the argv. The spec ([`ContainerSpec`]) validates every value at build time,
//! [`ContainerSpec::invoke`] checks a call into an [`agentguard_policy::Invocation`], and
//! [`ContainerSpec::run_command`] turns that into the complete engine argv as pure data, so the hardening is testable without an engine and
//! visible with `--dry-run`. [`ContainerExecutor`] runs it: cleaned engine environment, output
//! caps, timeouts and overflows that kill the container by name, typed engine errors, audit.

#![warn(missing_docs)]

mod argv;
mod builder;
mod capture;
pub mod checkup;
mod classify;
pub mod doctor;
mod effective;
mod engine;
mod error;
mod executor;
pub mod gc;
mod image;
mod kill;
mod kind;
mod masks;
pub mod oci;
mod paths;
mod process;
mod receipt;
mod record;
mod result;
mod rootless;
mod settings;
mod spec;
mod terminal;
mod values;

pub use argv::{
    EngineCommand, Masks, PROXY_SOCKET_TARGET, RELAY_TARGET, Relay, RouteVariable, RunIdentity,
    WORKSPACE_TARGET,
};
pub use builder::{ContainerSpecBuilder, check_image, check_mount_source};
pub use capture::{MAX_RECEIPT, OutputMeter};
pub use effective::MAX_TIMEOUT;
pub use engine::{Engine, on_path};
pub use error::{Error, Result, RunError};
pub use executor::{ContainerExecutor, DEFAULT_DRAIN_GRACE, Streaming};
pub use kill::KILL_ATTEMPTS;
pub use kind::EngineKind;
pub use masks::{MAX_GLOB_WALK, MAX_MASKS, Mask, MaskError, glob_matches, hidden_paths};
pub use process::{LABEL_DEADLINE, LABEL_OWNER, LABEL_OWNER_START};
pub use receipt::Receipt;
pub use result::{RunResult, RunStatus};
pub use settings::CommandSettings;
pub use spec::{
    ContainerSpec, ImagePin, PROXY_VARIABLES, ROUTES_NO_PROXY, WorkspaceMode, proxy_environment,
};
pub use terminal::Neutralized;
pub use values::{ByteSize, Cpus, Pull, Runtime, UserIds};

#[cfg(test)]
mod tests;

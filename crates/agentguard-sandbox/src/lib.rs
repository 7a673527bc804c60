//! A hardened container whose only way out is its own egress proxy (`network = "egress"`).
//!
//! The container and egress crates do not know each other; this crate composes them for one
//! run. For a `network = "egress"` command it creates a 0700 folder for the run, copies the
//! static relay into it, starts an in-process [`agentguard_egress::EgressProxy`] with that
//! command's allowlist on a UNIX socket there, and runs the container with `--network none`,
//! the relay and the socket bind-mounted read-only, and the proxy variables pointing at the
//! relay. When the run ends (exit, timeout, output limit, or the future being dropped on a
//! signal) the proxy stops and the folder is removed. Every decision of the proxy goes to the
//! run's audit log with `run` set to the container's name, and is counted for the result.
//!
//! A `network = "none"` command runs exactly as [`agentguard_container::ContainerExecutor`]
//! runs it: no relay, no mount, no proxy. Anything missing (the relay, the folder, the
//! socket, a runtime that cannot mount it) refuses the run; it never falls back to a network
//! without the proxy, and never starts the command without it.

#![warn(missing_docs)]

mod builder;
mod count;
mod elf;
mod error;
mod finished;
mod network;
pub mod relay;
pub mod run_dir;
mod sandbox;
mod tally;

pub use builder::SandboxBuilder;
pub use count::{EgressCounts, MAX_REFUSAL_EVENTS, MERGE_WINDOW, RunSink};
pub use error::{Error, Result};
pub use finished::Finished;
pub use network::{DEFAULT_PROXY_PORT, Network};
pub use sandbox::{RunOptions, Sandbox};
pub use tally::{MAX_LISTED_TARGETS, TargetCount};

//! `agentguard mcp`: the allowlisted commands as Model Context Protocol tools on stdio.
//!
//! One tool per allowlisted command, whose input schema is generated from its typed params
//! (the agent picks a name and fills checked slots, never an argv; every value is decided by
//! the policy crate's validator, never by the schema alone), and a `fetch` tool for the DNS-pinned fetch when one is configured.
//! Every call runs through the same [`agentguard_sandbox::Sandbox`] as `agentguard run`
//! (hardened container, its own egress proxy for `network = "egress"`), its result is one
//! JSON object (sanitized, head and tail kept) in both `structuredContent` and the only text
//! block, and it is recorded as an `mcp_call` audit event. Both protocol eras are served (the
//! `initialize` handshake and the stateless 2026-07-28 revision), by the official SDK `rmcp`,
//! which no other crate names.

#![warn(missing_docs)]

mod builder;
mod error;
mod event;
mod gate;
pub mod present;
pub mod result;
mod runner;
pub mod schema;
mod serve;
mod server;
pub mod tools;
mod wire;

pub use builder::McpServerBuilder;
pub use error::Error;
pub use runner::{RunFuture, Runner};
pub use serve::serve;
pub use server::{DEFAULT_PROGRESS_EVERY, McpServer};
pub use tools::{FETCH_TOOL, FetchTool, Format, ToolSet};

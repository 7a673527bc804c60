//! Why the server could not be set up or served.

/// Why the server could not be set up or served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A command name that cannot be a tool name.
    #[error("command {name:?} cannot be an MCP tool: {why}")]
    ToolName {
        /// The name.
        name: String,
        /// Why.
        why: String,
    },
    /// The stdio transport failed.
    #[error("serving MCP on stdio failed: {0}")]
    Serve(String),
}

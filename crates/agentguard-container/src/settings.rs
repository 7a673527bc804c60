//! What one command sets for itself (`[commands.NAME]`), over the spec's values: its
//! workspace mode, time limit, output cap, memory, CPUs, pids, `/tmp` size, environment, and
//! its writable and hidden paths (merged with the spec's own); `effective.rs` applies them.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::Result;
use crate::values::{ByteSize, Cpus};

/// One command's own values; `None` (or empty) keeps the spec's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommandSettings {
    /// `workspace_mode`.
    pub workspace_mode: Option<crate::values::WorkspaceMode>,
    /// `timeout`.
    pub timeout: Option<Duration>,
    /// `max_output_bytes`.
    pub max_output_bytes: Option<usize>,
    /// `memory`.
    pub memory: Option<ByteSize>,
    /// `cpus`.
    pub cpus: Option<Cpus>,
    /// `pids`.
    pub pids: Option<u32>,
    /// `tmpfs_size`.
    pub tmpfs_size: Option<ByteSize>,
    /// `[commands.NAME.environment]`: set over the spec's environment.
    pub environment: BTreeMap<String, String>,
    /// `writable`: added to the spec's.
    pub writable: Vec<String>,
    /// `hidden`: added to the spec's.
    pub hidden: Vec<String>,
}

impl CommandSettings {
    /// `memory` as the spec reads it (the same bounds).
    pub fn parse_memory(text: &str) -> Result<ByteSize> {
        ByteSize::parse("memory", text, crate::values::MIN_MEMORY)
    }

    /// `tmpfs_size` as the spec reads it (the same bounds).
    pub fn parse_tmpfs_size(text: &str) -> Result<ByteSize> {
        ByteSize::parse("tmpfs_size", text, crate::values::MIN_TMPFS)
    }
}

//! The clap definitions of `init`, `config` and `policy`: the commands that write and learn a
//! config (the rest of the command-line contract is in `args.rs`).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Template {
    /// pip install with the network, pytest without it.
    Pytest,
    /// npm ci with the network, npm test without it.
    Npm,
    /// cargo fetch with the network, cargo test offline.
    Cargo,
    /// One read-only command, no network.
    Generic,
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// The workflow the file is written for.
    #[arg(long, value_enum, default_value = "generic")]
    pub(crate) template: Template,
    /// Where to write it.
    #[arg(long, env = "AGENTGUARD_CONFIG", default_value = "agentguard.toml")]
    pub(crate) config: PathBuf,
    /// Replace a file that exists.
    #[arg(long)]
    pub(crate) force: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the JSON Schema (draft 2020-12) of agentguard.toml, for editors (taplo, VS Code).
    Schema,
}

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Print what to add to a config so that what verified audit logs show refused (or an
    /// observe run let through) would be allowed: exact hosts, ports, route methods and paths.
    Suggest(SuggestArgs),
    /// Say, without running anything, whether the policy file NEW stays within an operator's
    /// floor and, against OLD, what it adds and removes; exit 1 when it goes beyond the floor,
    /// or adds to OLD, naming each entry (a pattern covered by a wider one counts as covered).
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The floor: the largest policy any config may grant (a policy file).
    #[arg(long, env = "AGENTGUARD_FLOOR", value_name = "FILE")]
    pub(crate) floor: Option<PathBuf>,
    /// The policy file NEW replaces.
    #[arg(long, value_name = "OLD")]
    pub(crate) against: Option<PathBuf>,
    /// The policy file to check.
    #[arg(value_name = "NEW")]
    pub(crate) new: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SuggestFormat {
    Toml,
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct SuggestArgs {
    /// Audit logs; each must verify from its first line to its last.
    #[arg(required = true, value_name = "LOG")]
    pub(crate) logs: Vec<PathBuf>,
    /// Suggest only what this config does not allow yet, as the complete new value of each
    /// key to change.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Only this command's runs.
    #[arg(long, value_name = "NAME")]
    pub(crate) command: Option<String>,
    /// The output format.
    #[arg(long, value_enum, default_value = "toml")]
    pub(crate) format: SuggestFormat,
    /// Propose `*.suffix` for 3 or more sibling hosts instead of each name.
    #[arg(long)]
    pub(crate) wildcards: bool,
    /// Apply the suggestion to the `--config` file in place (comments and order kept).
    #[arg(long, requires = "config")]
    pub(crate) write: bool,
    /// Environment variable holding the logs' HMAC key, to check signatures while reading.
    #[arg(long, value_name = "VAR")]
    pub(crate) key_env: Option<String>,
}

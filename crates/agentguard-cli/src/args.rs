//! The command-line surface of `agentguard`, exactly as DESIGN.md spells it.
//!
//! Scripts outside this repository depend on these words, so every subcommand and flag of the
//! contract is declared here, in one place.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::net_args::NetPolicyArgs;

/// AgentGuard: isolation for an AI agent's tool calls.
///
/// Containers run only allowlisted commands with every hardening default on; DNS pinning and
/// an allowlisting egress proxy limit the network; every decision can be audited.
#[derive(Debug, Parser)]
#[command(name = "agentguard", version, propagate_version = true)]
pub(crate) struct Cli {
    /// More diagnostics on stderr (-v info, -vv debug, -vvv trace); AGENTGUARD_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run an allowlisted command NAME in a hardened container.
    Run(RunArgs),
    /// Run the allowlisting CONNECT proxy.
    EgressProxy(EgressProxyArgs),
    /// Fetch an HTTPS URL with DNS pinning: every resolved address must be public.
    Fetch(FetchArgs),
    /// Say whether IP addresses are public, naming the range of each non-public one. Never dials.
    Classify(ClassifyArgs),
    /// Verify or show an audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Check engines, runtimes (runsc), cgroups, limits that would not apply, and what a
    /// config needs (its image, each command's program, egress names, secrets, paths).
    Doctor(DoctorArgs),
    /// Remove containers left behind by a crashed run.
    Gc(GcArgs),
    /// Serve the allowlisted commands as MCP tools on stdio (no free-form input at all).
    Mcp(McpArgs),
    /// Print the tool definitions `mcp` serves, for frameworks without MCP.
    Tools(ToolsArgs),
    /// Kubernetes (`engine = "kubernetes"`).
    #[command(subcommand)]
    K8s(K8sCommand),
    /// Learn the policy from audit logs.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Write a starter agentguard.toml, every key commented.
    Init(InitArgs),
    /// The config file's format.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), agentguard.1.
    #[command(hide = true)]
    Manpage,
}

pub(crate) use crate::args_egress::EgressProxyArgs;
pub(crate) use crate::args_learn::{
    CheckArgs, ConfigCommand, InitArgs, PolicyCommand, SuggestArgs, SuggestFormat, Template,
};

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The config to check (default: AGENTGUARD_CONFIG, else ./agentguard.toml when it
    /// exists); a file named here that does not exist is a failed check.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The config file.
    #[arg(long, env = "AGENTGUARD_CONFIG", default_value = "agentguard.toml")]
    pub(crate) config: PathBuf,
    /// The allowlisted command name.
    pub(crate) name: String,
    /// The command's params, each `P=VALUE` (one argv element each, checked against the
    /// param's declared type before anything starts).
    #[arg(value_name = "P=VALUE", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub(crate) params: Vec<std::ffi::OsString>,
    /// Print one JSON object with the result instead of streaming the output.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print the engine argv and exit without running anything.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Copy the command's output byte for byte even to a terminal (by default escape
    /// sequences and control characters are shown as text there, never acted on).
    #[arg(long)]
    pub(crate) raw: bool,
    /// An observe run of a trusted `network = "egress"` command: its proxy lets through what
    /// the policy would refuse when every resolved address is public, and records it as
    /// `observed`, for `agentguard policy suggest` (docs/learn.md).
    #[arg(long)]
    pub(crate) observe: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum K8sCommand {
    /// Print, as YAML documents, what a run of NAME would apply: the Job, its NetworkPolicy,
    /// and for `network = "egress"` the proxy's Deployment, Service and NetworkPolicy.
    Manifests(K8sManifestsArgs),
    /// The NetworkPolicy canary (run by `doctor` inside a pod under a deny-all policy): try
    /// each TARGET (IP:PORT; default the API server, from KUBERNETES_SERVICE_HOST and _PORT),
    /// exit 0 when none is reached, 1 when one is.
    Canary(K8sCanaryArgs),
    /// Write the static relay built into this agentguard to PATH (which must not exist),
    /// executable and read-only: a run pod's init container does this in the proxy image, and
    /// the relay then takes the run's isolation receipt before the command starts.
    Relay(K8sRelayArgs),
}

#[derive(Debug, Args)]
pub(crate) struct K8sRelayArgs {
    /// Where to write it.
    pub(crate) path: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct K8sCanaryArgs {
    /// Seconds each connection attempt may take.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub(crate) timeout: u64,
    /// IP:PORT to try.
    pub(crate) targets: Vec<std::net::SocketAddr>,
}

#[derive(Debug, Args)]
pub(crate) struct K8sManifestsArgs {
    /// The config file (with engine = "kubernetes" and a [kubernetes] table).
    #[arg(long, env = "AGENTGUARD_CONFIG", default_value = "agentguard.toml")]
    pub(crate) config: PathBuf,
    /// The allowlisted command name.
    pub(crate) name: String,
    /// The command's params, each `P=VALUE`, as for `agentguard run`.
    #[arg(value_name = "P=VALUE", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub(crate) params: Vec<std::ffi::OsString>,
}

/// `P=VALUE` words as the policy crate takes them: the name up to the first `=` (UTF-8, or
/// a usage error), the value as given (bytes that are not UTF-8 are refused by the param's
/// check, which is audited).
pub(crate) fn param_words(
    words: &[std::ffi::OsString],
) -> Result<Vec<(String, agentguard_policy::Arg)>, crate::exit::Exit> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::with_capacity(words.len());
    for word in words {
        let bytes = word.as_bytes();
        let Some(eq) = bytes.iter().position(|b| *b == b'=') else {
            return Err(crate::exit::Exit::usage(format!(
                "{:?} is not P=VALUE; give each param as NAME=VALUE, e.g. path=tests/test_api.py",
                word.to_string_lossy()
            )));
        };
        let Ok(name) = std::str::from_utf8(&bytes[..eq]) else {
            return Err(crate::exit::Exit::usage(format!(
                "the param name in {:?} is not UTF-8",
                word.to_string_lossy()
            )));
        };
        let value = match String::from_utf8(bytes[eq + 1..].to_vec()) {
            Ok(text) => agentguard_policy::Arg::Word(text),
            Err(e) => {
                agentguard_policy::Arg::NotUtf8(String::from_utf8_lossy(e.as_bytes()).into_owned())
            }
        };
        out.push((name.to_owned(), value));
    }
    Ok(out)
}

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// The config file (relative to CLAUDE_PROJECT_DIR when that is set and the file is there).
    #[arg(long, env = "AGENTGUARD_CONFIG", default_value = "agentguard.toml")]
    pub(crate) config: PathBuf,
    /// At most this many runs at once (default: the core count); the rest wait within their timeout.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) max_concurrent: Option<u16>,
}

/// The formats of `agentguard tools`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ToolsFormat {
    /// `{"tools": [...]}`, as `tools/list` answers.
    Mcp,
    /// OpenAI function definitions with strict schemas.
    Openai,
    /// Anthropic tool definitions.
    Anthropic,
}

#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    /// The config file.
    #[arg(long, env = "AGENTGUARD_CONFIG", default_value = "agentguard.toml")]
    pub(crate) config: PathBuf,
    /// The format.
    #[arg(long, value_enum, default_value = "mcp")]
    pub(crate) format: ToolsFormat,
}

#[derive(Debug, Args)]
pub(crate) struct FetchArgs {
    /// The https:// URL.
    pub(crate) url: String,
    #[command(flatten)]
    pub(crate) net: NetPolicyArgs,
    /// Largest response body accepted, in bytes.
    #[arg(long, value_name = "N")]
    pub(crate) max_bytes: Option<u64>,
    /// Extra trust roots (PEM).
    #[arg(long, value_name = "PEM")]
    pub(crate) ca_file: Option<PathBuf>,
    /// Append the decision to this audit log.
    #[arg(long, value_name = "FILE")]
    pub(crate) audit: Option<PathBuf>,
    /// Sign the audit log with the HMAC key in this environment variable.
    #[arg(long, value_name = "VAR", requires = "audit")]
    pub(crate) audit_key_env: Option<String>,
    /// Print one JSON object (status, headers, body, address dialed).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ClassifyArgs {
    /// IP addresses: IPv4 (also in the decimal, octal, hex and short forms URL parsers
    /// accept), IPv6, or bracketed IPv6.
    #[arg(required = true, value_name = "IP")]
    pub(crate) addresses: Vec<String>,
    /// Print one JSON object per line instead of tab-separated text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Verify the hash chain (and HMAC) of an audit log; names the first bad line.
    Verify(AuditVerifyArgs),
    /// Show an audit log as a table or as JSON, verifying as it reads.
    Show(AuditShowArgs),
    /// Truncate a torn last line left by a crash, and record the repair in the log.
    Repair(AuditRepairArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AuditVerifyArgs {
    /// The audit log.
    pub(crate) file: PathBuf,
    /// Environment variable holding the HMAC key.
    #[arg(long, value_name = "VAR")]
    pub(crate) key_env: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum DecisionFilter {
    Allow,
    Deny,
    Error,
}

#[derive(Debug, Args)]
pub(crate) struct AuditShowArgs {
    /// The audit log.
    pub(crate) file: PathBuf,
    /// Environment variable holding the HMAC key, to check signatures while reading.
    #[arg(long, value_name = "VAR")]
    pub(crate) key_env: Option<String>,
    /// Only events with this decision.
    #[arg(long)]
    pub(crate) decision: Option<DecisionFilter>,
    /// Only events of this kind (every kind a log can hold is offered).
    #[arg(long, value_name = "K", value_parser = clap::builder::PossibleValuesParser::new(agentguard_audit::Kind::ALL.map(|k| k.as_str())))]
    pub(crate) kind: Option<String>,
    /// Only events at or after TIME: RFC 3339 (`2026-11-29T09:00:00Z`, `2026-11-29T09:00`,
    /// `2026-11-29`; UTC unless an offset is given) or a span before now (`30s`, `15m`, `2h`,
    /// `7d`).
    #[arg(long, value_name = "TIME")]
    pub(crate) since: Option<String>,
    /// Only events before TIME (the forms of `--since`).
    #[arg(long, value_name = "TIME")]
    pub(crate) until: Option<String>,
    /// Every event of one run: its `container_run`, its `mcp_call`, its proxy's egress
    /// events (ID: the container or Job name the table's RUN column shows).
    #[arg(long, value_name = "ID")]
    pub(crate) run: Option<String>,
    /// Only events of this allowlisted command (`container_run`).
    #[arg(long, value_name = "NAME")]
    pub(crate) command: Option<String>,
    /// Only calls of this MCP tool (`mcp_call`).
    #[arg(long, value_name = "NAME")]
    pub(crate) tool: Option<String>,
    /// Keep reading: show events as they are appended, verifying each, until interrupted.
    #[arg(long)]
    pub(crate) follow: bool,
    /// Print the raw events.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AuditRepairArgs {
    /// The audit log.
    pub(crate) file: PathBuf,
    /// Environment variable holding the HMAC key of a signed log.
    #[arg(long, value_name = "VAR")]
    pub(crate) key_env: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// List what would be removed without removing it.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// A config with engine = "kubernetes": sweep the Jobs of its namespace instead of the
    /// local engines.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
}

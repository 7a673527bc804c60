//! The clap definitions of `egress-proxy` (the rest of the command-line contract is in
//! `args.rs`).

use std::path::PathBuf;

use clap::Args;

use crate::net_args::NetPolicyArgs;

#[derive(Debug, Args)]
pub(crate) struct EgressProxyArgs {
    #[command(flatten)]
    pub(crate) net: NetPolicyArgs,
    /// The allow rules, nameservers and routes from this policy file (top-level `allow`,
    /// `allow_ports`, `allow_cidrs`, `nameservers`, `[routes.NAME]`, `[secrets]`), reloaded
    /// on SIGHUP; instead of --allow, --allow-port, --allow-cidr, --nameserver and --route.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["allow", "allow_port", "allow_cidr", "nameserver", "route"])]
    pub(crate) policy: Option<PathBuf>,
    /// Reload the policy file also when it changes (checked every 250 ms, loaded once it has
    /// stayed the same for one check).
    #[arg(long, requires = "policy")]
    pub(crate) watch: bool,
    /// Serve Prometheus metrics on `/metrics` and health on `/healthz` at this IP:PORT: a
    /// port of its own, which no sandbox must be able to reach.
    #[arg(long, value_name = "IP:PORT")]
    pub(crate) metrics: Option<std::net::SocketAddr>,
    /// The address to listen on.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub(crate) bind: String,
    /// The port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 3128)]
    pub(crate) port: u16,
    /// Append every decision to this audit log.
    #[arg(long, value_name = "FILE")]
    pub(crate) audit: Option<PathBuf>,
    /// Sign the audit log with the HMAC key in this environment variable.
    #[arg(long, value_name = "VAR", requires = "audit")]
    pub(crate) audit_key_env: Option<String>,
    /// Write every decision as a numbered JSON line on stdout, after the listening line, and
    /// an end line at exit: for a follower (agentguard's cluster executor) that appends them
    /// to its own chained log.
    #[arg(long, requires = "run", conflicts_with = "audit")]
    pub(crate) audit_stdout: bool,
    /// The run the decisions belong to (their subject `run`), with --audit-stdout.
    #[arg(long, value_name = "ID", requires = "audit_stdout")]
    pub(crate) run: Option<String>,
    /// Serve a credential route: `{"name", "secret_file", "route": TABLE}`, TABLE as a
    /// `[routes.NAME]` table; repeatable. With a route, --allow may be left out (CONNECT then
    /// reaches nothing). How a cluster's proxy pod is given its routes.
    #[arg(long, value_name = "JSON")]
    pub(crate) route: Vec<String>,
    /// Maximum concurrent connections (default: what the descriptor limit affords).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub(crate) max_connections: Option<u64>,
    /// Seconds for resolution and the dial across every address, together (default 10).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) connect_timeout: Option<u64>,
    /// Seconds a tunnel may move no byte either way (default 300).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub(crate) idle_timeout: Option<u64>,
    /// Seconds a tunnel stays open after one side finished while the other is silent
    /// (default 5).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) half_close_timeout: Option<u64>,
    /// Do not check, on port 443, that the ClientHello asks for the CONNECT host.
    #[arg(long)]
    pub(crate) no_sni_check: bool,
    /// Seconds open connections get to finish after SIGINT/SIGTERM before they are closed.
    #[arg(long, value_name = "S", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub(crate) grace: u64,
    /// A policy file the allow rules and routes must stay within (the operator's floor); the
    /// proxy refuses to start (exit 2) naming each entry beyond it.
    #[arg(long, env = "AGENTGUARD_FLOOR", value_name = "FILE")]
    pub(crate) floor: Option<PathBuf>,
}

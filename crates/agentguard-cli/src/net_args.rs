//! The network flags `fetch` and `egress-proxy` share, turned into library values once.
//!
//! `--allow`, `--allow-port`, `--allow-cidr` and `--nameserver` are declared here once and
//! flattened into both subcommands; [`NetPolicyArgs::policy`] builds the one `TargetPolicy`
//! both libraries take, and [`NetPolicyArgs::resolver`] the resolver. Errors keep their
//! typed causes, so `exit::code_for` gives the same code in both subcommands.

use std::sync::Arc;

use agentguard_netpin::{DnsResolver, Resolve};
use agentguard_policy::TargetPolicy;
use anyhow::Context;
use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct NetPolicyArgs {
    /// An allowed host or pattern (`pkgs.example.com`, `*.example.com`, `*`); repeatable.
    #[arg(long, value_name = "HOST")]
    pub(crate) allow: Vec<String>,
    /// An allowed port (default: 443 only); repeatable.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) allow_port: Vec<u16>,
    /// Treat this range as reachable even if non-public; repeatable.
    #[arg(long, value_name = "CIDR")]
    pub(crate) allow_cidr: Vec<String>,
    /// Use these DNS servers instead of the system resolver; repeatable.
    #[arg(long, value_name = "IP:PORT")]
    pub(crate) nameserver: Vec<String>,
}

impl NetPolicyArgs {
    /// The hosts, ports and address overrides as one validated policy.
    pub(crate) fn policy(&self) -> anyhow::Result<TargetPolicy> {
        let context = if self.allow.is_empty() {
            "no --allow given"
        } else {
            "--allow"
        };
        crate::config::policy_from(
            &self.allow,
            &self.allow_port,
            &self.allow_cidr,
            ("--allow-cidr", context),
        )
    }

    /// The resolver for `--nameserver IP:PORT...`, or `None` for the system configuration.
    /// Must be called inside the async runtime.
    pub(crate) fn resolver(&self) -> anyhow::Result<Option<Arc<dyn Resolve>>> {
        if self.nameserver.is_empty() {
            return Ok(None);
        }
        let servers = self
            .nameserver
            .iter()
            .map(|s| DnsResolver::parse_nameserver(s))
            .collect::<Result<Vec<_>, _>>()
            .context("--nameserver")?;
        let resolver = DnsResolver::with_nameservers(&servers).context("--nameserver")?;
        Ok(Some(Arc::new(resolver)))
    }
}

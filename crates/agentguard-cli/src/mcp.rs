//! `agentguard mcp`: the allowlisted commands as MCP tools on stdio; and `agentguard tools`,
//! the same definitions printed for frameworks without MCP.
//!
//! The config is read once, before anything is served (a mistake exits non-zero with the
//! usual codes); stdout then carries nothing but JSON-RPC: runs never stream, diagnostics go
//! to stderr, and every engine child has stdin from /dev/null. SIGINT, SIGTERM and the end of
//! stdin stop every run (its container killed by name) and end the server with 0. With
//! `engine = "kubernetes"` each call is a Job (`cluster_mcp`), deleted on cancel and stop.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::AuditSink;
use agentguard_container::Streaming;
use agentguard_mcp::{FetchTool, Format, McpServer, ToolSet};
use agentguard_netpin::{DEFAULT_MAX_BYTES, DnsResolver, Fetcher};
use anyhow::Context;

use crate::args::{McpArgs, ToolsArgs, ToolsFormat};
use crate::cluster_mcp::ClusterRunner;
use crate::config::{self, FetchTable, RunConfig};
use crate::signal::Shutdown;
use crate::{exit, output};

/// Overrides how often a long call reports progress (milliseconds; for tests and demos).
const PROGRESS_ENV: &str = "AGENTGUARD_MCP_PROGRESS_MS";

/// `--config`, resolved against `CLAUDE_PROJECT_DIR` (which Claude Code sets for a stdio
/// server) when it is relative and found there.
fn config_path(path: &Path) -> PathBuf {
    match std::env::var_os("CLAUDE_PROJECT_DIR") {
        Some(dir) if path.is_relative() && Path::new(&dir).join(path).exists() => {
            Path::new(&dir).join(path)
        }
        _ => path.to_owned(),
    }
}

/// The fetch tool's description and fetcher, when `[fetch]` is configured.
/// The fetcher records every fetch in `audit` (the same `fetch` event as `agentguard fetch
/// --audit`) before its result is returned.
fn fetch_tool(
    table: Option<&FetchTable>,
    audit: Option<&Arc<dyn AuditSink>>,
) -> anyhow::Result<Option<(FetchTool, Fetcher)>> {
    let Some(table) = table else {
        return Ok(None);
    };
    let max_bytes = table.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    let mut builder = Fetcher::builder()
        .policy(table.policy()?)
        .max_bytes(max_bytes);
    if let Some(sink) = audit {
        builder = builder.audit(Arc::clone(sink));
    }
    if let Some(path) = &table.ca_file {
        let pem = std::fs::read(path)
            .with_context(|| format!("reading [fetch] ca_file {}", path.display()))?;
        builder = builder.extra_roots_pem(pem);
    }
    let servers = table.nameservers()?;
    if !servers.is_empty() {
        let resolver = DnsResolver::with_nameservers(&servers).context("[fetch] nameservers")?;
        builder = builder.resolver(Arc::new(resolver));
    }
    let tool = FetchTool {
        hosts: table.allow.clone(),
        max_bytes,
    };
    Ok(Some((tool, builder.build().context("[fetch]")?)))
}

/// The sandbox and the tools of a config, and the fetcher. Must run inside the runtime.
fn setup(
    config: RunConfig,
    audit: Option<Arc<dyn AuditSink>>,
) -> anyhow::Result<(agentguard_sandbox::Sandbox, ToolSet, Option<Fetcher>)> {
    let fetch = fetch_tool(config.fetch.as_ref(), audit.as_ref())?;
    let descriptions = config.commands.descriptions().clone();
    // Never streaming: stdout is the protocol's.
    let sandbox = config
        .commands
        .sandbox(config.spec, audit, Streaming::Off)?;
    let tools = ToolSet::new(&sandbox, &descriptions, fetch.as_ref().map(|(t, _)| t))?;
    Ok((sandbox, tools, fetch.map(|(_, f)| f)))
}

pub(crate) fn run(args: &McpArgs) -> anyhow::Result<u8> {
    let config = config::load(&config_path(&args.config))?;
    let audit = crate::config::runs_log(config.audit.as_ref())?;
    // On a cluster each call is a Job; the sandbox still checks every call.
    let cluster = match config.cluster() {
        Some(cluster) => Some(ClusterRunner::new(&config, cluster, audit.clone())?),
        None => None,
    };
    let progress = std::env::var(PROGRESS_ENV)
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(
            agentguard_mcp::DEFAULT_PROGRESS_EVERY,
            Duration::from_millis,
        );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(async {
        let (sandbox, tools, fetcher) = setup(config, audit.clone())?;
        let mut builder = McpServer::builder(sandbox, tools).progress_every(progress);
        if let Some(cluster) = cluster {
            builder = builder.runner(Arc::new(cluster));
        }
        if let Some(n) = args.max_concurrent {
            builder = builder.max_concurrent(usize::from(n));
        }
        if let Some(sink) = audit {
            builder = builder.audit(sink);
        }
        if let Some(fetcher) = fetcher {
            builder = builder.fetcher(fetcher);
        }
        let server = builder.build()?;
        let mut signals = Shutdown::install()?;
        let stop = server.stop_token();
        tokio::spawn(async move {
            let signal = signals.recv().await;
            tracing::info!(signal = signal.name(), "stopping every run");
            stop.cancel();
        });
        agentguard_mcp::serve(server, tokio::io::stdin(), tokio::io::stdout()).await?;
        anyhow::Ok(())
    });
    // Tokio's stdin read blocks a pool thread that nothing can interrupt: do not wait for it.
    runtime.shutdown_background();
    served?;
    Ok(exit::SUCCESS)
}

pub(crate) fn tools(args: &ToolsArgs) -> anyhow::Result<u8> {
    let config = config::load(&args.config)?;
    let runtime = crate::signal::runtime()?;
    let tools = runtime.block_on(async { setup(config, None).map(|(_, tools, _)| tools) })?;
    let format = match args.format {
        ToolsFormat::Mcp => Format::Mcp,
        ToolsFormat::Openai => Format::Openai,
        ToolsFormat::Anthropic => Format::Anthropic,
    };
    let text = serde_json::to_string_pretty(&tools.export(format))?;
    output::write_lines([text])?;
    Ok(exit::SUCCESS)
}

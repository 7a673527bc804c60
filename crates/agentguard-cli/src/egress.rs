//! `agentguard egress-proxy`: the allowlisting CONNECT proxy as a long-running process.
//!
//! Prints exactly one line on stdout once it accepts connections, `listening on IP:PORT`
//! (with the real port when `--port 0`), then runs until SIGINT or SIGTERM, stops accepting,
//! lets open tunnels finish for `--grace` seconds, and syncs the audit log before exiting 0.
//! With `--audit-stdout --run ID` every decision follows on stdout as a numbered JSON line
//! ([`agentguard_audit::StreamSink`]), and the end line is written last; its diagnostics
//! are note lines of the same stream (see `logging`), which may come before the readiness
//! line: stdout is then the whole of what a cluster pod's log holds.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{AuditSink, Durability, StreamSink};
use agentguard_egress::{EgressProxy, EgressProxyBuilder};
use anyhow::Context;

use crate::args::EgressProxyArgs;
use crate::exit::{self, Exit};
use crate::signal::Shutdown;

/// The allow rules and routes of the flags, refused when they go beyond `--floor`.
fn rules(
    args: &EgressProxyArgs,
) -> anyhow::Result<(
    Option<agentguard_policy::TargetPolicy>,
    Vec<agentguard_egress::Route>,
)> {
    let routes = args
        .route
        .iter()
        .map(|text| agentguard_config::proxy_route(text).map_err(Exit::usage))
        .collect::<Result<Vec<_>, _>>()?;
    // Routes only: CONNECT reaches nothing.
    let policy = match (args.net.allow.is_empty(), routes.is_empty()) {
        (true, false) => None,
        _ => Some(args.net.policy()?),
    };
    if let Some(floor) = &args.floor {
        let grant = agentguard_config::proxy_grant(policy.as_ref(), &routes);
        agentguard_config::check_floor(&grant, floor, "egress-proxy")?;
    }
    Ok((policy, routes))
}

pub(crate) fn run(args: &EgressProxyArgs) -> anyhow::Result<u8> {
    let (policy, routes) = rules(args)?;
    let ip: IpAddr = args
        .bind
        .parse()
        .map_err(|_| Exit::usage(format!("--bind {:?} is not an IP address", args.bind)))?;
    let mut builder = builder(args, policy, ip);
    for route in routes {
        builder = builder.route(Arc::new(route));
    }
    // The proxy's decisions are frequent and on the hot path: flush durability (docs/audit.md).
    let log = match &args.audit {
        Some(path) => Some(Arc::new(crate::config::open_log(
            path,
            Durability::Flush,
            "--audit-key-env",
            args.audit_key_env.as_deref(),
        )?)),
        None => None,
    };
    if let Some(log) = &log {
        builder = builder.audit(Arc::clone(log) as Arc<dyn AuditSink>);
    }
    let stream = stream(args)?;
    if let Some(stream) = &stream {
        builder = builder.audit(Arc::clone(stream) as Arc<dyn AuditSink>);
    }
    // One event-loop thread: measured faster at connection setup than two workers on our
    // 2-core machines (docs/PERFORMANCE.md), at the same tunnel throughput, since splice keeps
    // the per-byte work in the kernel. Audit writes still run on the blocking pool.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        if let Some(resolver) = args.net.resolver()? {
            builder = builder.resolver(resolver);
        }
        let mut shutdown = Shutdown::install()?;
        let proxy = builder.start().await?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on {}", proxy.local_addr())?;
        stdout.flush()?;
        drop(stdout);
        let stop = shutdown.recv().await;
        tracing::info!(signal = stop.name(), "shutting down");
        let result = proxy.shutdown(Duration::from_secs(args.grace)).await;
        if !result.drained {
            let note = format!(
                "agentguard: closed tunnels still open after the {} s grace period",
                args.grace
            );
            match &stream {
                Some(stream) => stream.note(&note).context("writing a note line")?,
                None => crate::output::note(&note),
            }
        }
        anyhow::Ok(())
    })?;
    if let Some(log) = log {
        log.sync().context("syncing the audit log")?;
    }
    if let Some(stream) = stream {
        stream
            .end()
            .context("writing the audit stream's end line")?;
    }
    Ok(exit::SUCCESS)
}

/// The proxy as its flags configure it, before its audit sinks and resolver.
fn builder(
    args: &EgressProxyArgs,
    policy: Option<agentguard_policy::TargetPolicy>,
    ip: IpAddr,
) -> EgressProxyBuilder {
    let mut builder = EgressProxy::builder().bind(SocketAddr::new(ip, args.port));
    if let Some(policy) = policy {
        builder = builder.policy(policy);
    }
    if let Some(n) = args.max_connections {
        builder = builder.max_connections(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(s) = args.half_close_timeout {
        builder = builder.half_close_timeout(Duration::from_secs(s));
    }
    builder = builder.sni_check(!args.no_sni_check);
    if let Some(s) = args.connect_timeout {
        builder = builder.connect_timeout(Duration::from_secs(s));
    }
    if let Some(s) = args.idle_timeout {
        builder = builder.idle_timeout(Duration::from_secs(s));
    }
    builder
}

/// The audit stream on stdout of `--audit-stdout --run ID`, the run checked as a DNS label.
fn stream(args: &EgressProxyArgs) -> anyhow::Result<Option<Arc<StreamSink<std::io::Stdout>>>> {
    match (&args.run, args.audit_stdout) {
        (Some(run), true) => {
            agentguard_k8s::dns_label("--run", run).map_err(|e| Exit::usage(e.to_string()))?;
            Ok(Some(Arc::new(StreamSink::new(std::io::stdout(), run))))
        }
        _ => Ok(None),
    }
}

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

use agentguard_audit::{AuditSink, Durability, Event, StreamSink};
use agentguard_egress::{EgressProxy, EgressProxyBuilder, ProxyRules};
use anyhow::Context;

use crate::args::EgressProxyArgs;
use crate::egress_policy::Source;
use crate::exit::{self, Exit};
use crate::metrics::{Metered, Metrics};
use crate::signal::{Shutdown, Stop};

/// The allow rules and routes of the flags, refused when they go beyond `--floor`.
fn flag_rules(args: &EgressProxyArgs) -> anyhow::Result<ProxyRules> {
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
        agentguard_config::check_floor(&grant, "--floor", floor, "egress-proxy")?;
    }
    Ok(ProxyRules {
        policy,
        routes: routes.into_iter().map(Arc::new).collect(),
        resolver: args.net.resolver()?,
    })
}

/// The rules at start: from `--policy FILE` (with the event announcing them and the file to
/// reload), else from the flags. Inside the runtime (the resolver).
fn start_rules(
    args: &EgressProxyArgs,
) -> anyhow::Result<(ProxyRules, Option<Event>, Option<Source>)> {
    let Some(path) = &args.policy else {
        return Ok((flag_rules(args)?, None, None));
    };
    let (source, rules, event) =
        Source::start(path, args.floor.as_deref()).map_err(|refused| refused.error)?;
    Ok((rules, Some(event), Some(source)))
}

/// The flags no parser rule checks: the bind address, `--watch` without `--policy`, a metrics
/// port that is the proxy's.
fn checked(args: &EgressProxyArgs) -> anyhow::Result<IpAddr> {
    let ip: IpAddr = args
        .bind
        .parse()
        .map_err(|_| Exit::usage(format!("--bind {:?} is not an IP address", args.bind)))?;
    if args.watch && args.policy.is_none() {
        return Err(Exit::usage(
            "--watch reloads the --policy FILE when it changes; give --policy FILE, or leave --watch out",
        )
        .into());
    }
    if let Some(metrics) = args.metrics
        && metrics.port() == args.port
        && args.port != 0
    {
        return Err(Exit::usage(format!(
            "--metrics {metrics} uses the proxy's port {}; give the metrics a port of their own, one no sandbox can reach",
            args.port
        ))
        .into());
    }
    Ok(ip)
}

pub(crate) fn run(args: &EgressProxyArgs) -> anyhow::Result<u8> {
    let ip = checked(args)?;
    let mut builder = builder(args, ip);
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
    let stream = stream(args)?;
    let metrics = args.metrics.map(|_| Arc::new(Metrics::default()));
    if let Some(sink) = sink(log.as_ref(), stream.as_ref(), metrics.as_ref()) {
        builder = builder.audit(sink);
    }
    // One event-loop thread: measured faster at connection setup than two workers on our
    // 2-core machines (docs/PERFORMANCE.md), at the same tunnel throughput, since splice keeps
    // the per-byte work in the kernel. Audit writes still run on the blocking pool.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let (rules, loaded, source) = start_rules(args)?;
        builder = with_rules(builder, rules, loaded);
        let mut shutdown = Shutdown::install()?;
        let policy = match source {
            Some(source) => Some((source, crate::signal::hangup()?)),
            None => None,
        };
        let metrics_listener = match args.metrics {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("--metrics {addr}: binding"))?,
            ),
            None => None,
        };
        let proxy = builder.start().await?;
        if let (Some(listener), Some(metrics)) = (metrics_listener, &metrics) {
            tokio::spawn(crate::metrics::serve(listener, Arc::clone(metrics)));
        }
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on {}", proxy.local_addr())?;
        stdout.flush()?;
        drop(stdout);
        let stop = serve(&proxy, &mut shutdown, policy, args.watch).await;
        if let Some(metrics) = &metrics {
            metrics.drain();
        }
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

/// The proxy's audit sink: the log or the stream, with the metrics counted behind it.
fn sink(
    log: Option<&Arc<agentguard_audit::AuditLog>>,
    stream: Option<&Arc<StreamSink<std::io::Stdout>>>,
    metrics: Option<&Arc<Metrics>>,
) -> Option<Arc<dyn AuditSink>> {
    let sink: Option<Arc<dyn AuditSink>> = match (log, stream) {
        (Some(log), _) => Some(Arc::clone(log) as Arc<dyn AuditSink>),
        (None, Some(stream)) => Some(Arc::clone(stream) as Arc<dyn AuditSink>),
        (None, None) => None,
    };
    match metrics {
        Some(metrics) => Some(Arc::new(Metered::new(sink, Arc::clone(metrics)))),
        None => sink,
    }
}

/// Runs until SIGINT or SIGTERM, reloading the policy file (when there is one) on SIGHUP and,
/// with `watch`, once a change of the file has settled.
async fn serve(
    proxy: &EgressProxy,
    shutdown: &mut Shutdown,
    mut policy: Option<(Source, tokio::signal::unix::Signal)>,
    watch: bool,
) -> Stop {
    let Some((source, hangup)) = policy.as_mut() else {
        return shutdown.recv().await;
    };
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            stop = shutdown.recv() => return stop,
            _ = hangup.recv() => source.reload(proxy, "signal").await,
            _ = tick.tick(), if watch => {
                if source.settled_change() {
                    source.reload(proxy, "watch").await;
                }
            }
        }
    }
}

/// The builder given `rules` and the event announcing them.
fn with_rules(
    mut builder: EgressProxyBuilder,
    rules: ProxyRules,
    loaded: Option<Event>,
) -> EgressProxyBuilder {
    if let Some(policy) = rules.policy {
        builder = builder.policy(policy);
    }
    for route in rules.routes {
        builder = builder.route(route);
    }
    if let Some(resolver) = rules.resolver {
        builder = builder.resolver(resolver);
    }
    if let Some(loaded) = loaded {
        builder = builder.loaded(loaded);
    }
    builder
}

/// The proxy as its flags configure it, before its audit sinks and resolver.
fn builder(args: &EgressProxyArgs, ip: IpAddr) -> EgressProxyBuilder {
    let mut builder = EgressProxy::builder().bind(SocketAddr::new(ip, args.port));
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

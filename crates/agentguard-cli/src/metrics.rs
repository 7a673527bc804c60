//! `egress-proxy --metrics ADDR`: Prometheus text on `/metrics`, health on `/healthz`, on a
//! port of their own.
//!
//! The figures are counted from the audit events the proxy records: [`Metered`] wraps its sink
//! and counts an event only once the sink took it, so the counters match the audit log event
//! for event. `/healthz` answers 200 while the proxy accepts and 503 once it drains. The
//! server is a few lines of HTTP/1.1 on purpose: one request per connection, a head of at most
//! 8 KiB read within 5 s, at most 8 connections at once, nothing else.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentguard_audit::{Attempt, AuditSink, Decision, Event, Kind, Receipt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The upper bounds of `agentguard_egress_connect_seconds`' buckets.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
];

/// The figures, and whether the proxy drains.
#[derive(Default)]
pub(crate) struct Metrics {
    state: Mutex<State>,
    draining: AtomicBool,
}

#[derive(Default)]
struct State {
    decisions: BTreeMap<(&'static str, String), u64>,
    open: u64,
    up: u64,
    down: u64,
    /// Per bucket (the last is `+Inf`), the sum in microseconds, the count.
    connect: ([u64; BUCKETS.len() + 1], u64, u64),
    /// `None` until a policy file loads: a proxy of flags has one generation, 1.
    generation: Option<u64>,
    reload_failures: u64,
}

/// What one event changes, read before the sink takes it.
struct Seen {
    kind: Kind,
    decision: Decision,
    reason: String,
    up: u64,
    down: u64,
    connect_micros: Option<u64>,
    generation: Option<u64>,
}

impl Seen {
    fn of(event: &Event) -> Seen {
        let number = |key: &str| event.data.get(key).and_then(serde_json::Value::as_u64);
        Seen {
            kind: event.kind,
            decision: event.decision,
            reason: event.reason.clone(),
            up: number("bytes_up").unwrap_or(0),
            down: number("bytes_down").unwrap_or(0),
            connect_micros: number("connect_micros"),
            generation: number("generation"),
        }
    }
}

impl Metrics {
    /// Counts one recorded event.
    fn count(&self, seen: Seen) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match seen.kind {
            Kind::EgressConnect | Kind::EgressRoute => {
                *state
                    .decisions
                    .entry((seen.decision.as_str(), seen.reason))
                    .or_default() += 1;
                if seen.kind == Kind::EgressConnect && seen.decision == Decision::Allow {
                    state.open += 1;
                }
            }
            Kind::EgressClose => state.open = state.open.saturating_sub(1),
            Kind::PolicyLoaded if seen.decision == Decision::Allow => {
                state.generation = seen.generation;
            }
            Kind::PolicyLoaded => state.reload_failures += 1,
            _ => {}
        }
        if matches!(seen.kind, Kind::EgressClose | Kind::EgressRoute) {
            state.up += seen.up;
            state.down += seen.down;
        }
        if let Some(micros) = seen.connect_micros {
            let seconds = micros as f64 / 1e6;
            let bucket = BUCKETS
                .iter()
                .position(|&le| seconds <= le)
                .unwrap_or(BUCKETS.len());
            state.connect.0[bucket] += 1;
            state.connect.1 += micros;
            state.connect.2 += 1;
        }
    }

    /// From now on `/healthz` answers 503.
    pub(crate) fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// The Prometheus text exposition (format 0.0.4).
    fn render(&self) -> String {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        for (name, kind, help, samples) in families(&state) {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            out.push_str(&samples);
        }
        out
    }
}

/// Each family: its name, type, help and sample lines.
fn families(state: &State) -> [(&'static str, &'static str, &'static str, String); 6] {
    let mut decisions = String::new();
    for ((decision, reason), n) in &state.decisions {
        let _ = writeln!(
            decisions,
            "agentguard_egress_decisions_total{{decision=\"{decision}\",reason=\"{}\"}} {n}",
            label(reason)
        );
    }
    let mut connect = String::new();
    let mut below = 0;
    for (i, le) in BUCKETS.iter().enumerate() {
        below += state.connect.0[i];
        let _ = writeln!(
            connect,
            "agentguard_egress_connect_seconds_bucket{{le=\"{le}\"}} {below}"
        );
    }
    let (sum, count) = (state.connect.1 as f64 / 1e6, state.connect.2);
    let _ = write!(
        connect,
        "agentguard_egress_connect_seconds_bucket{{le=\"+Inf\"}} {count}\nagentguard_egress_connect_seconds_sum {sum}\nagentguard_egress_connect_seconds_count {count}\n"
    );
    [
        (
            "agentguard_egress_decisions_total",
            "counter",
            "Egress decisions (CONNECT requests and route requests), by decision and reason.",
            decisions,
        ),
        (
            "agentguard_egress_tunnels_open",
            "gauge",
            "CONNECT tunnels allowed and not yet closed.",
            format!("agentguard_egress_tunnels_open {}\n", state.open),
        ),
        (
            "agentguard_egress_bytes_total",
            "counter",
            "Bytes carried by closed tunnels and finished route requests, up (to the upstream) and down.",
            format!(
                "agentguard_egress_bytes_total{{direction=\"up\"}} {}\nagentguard_egress_bytes_total{{direction=\"down\"}} {}\n",
                state.up, state.down
            ),
        ),
        (
            "agentguard_egress_connect_seconds",
            "histogram",
            "Seconds from a CONNECT request to its upstream connection (decision, resolution, dial).",
            connect,
        ),
        (
            "agentguard_policy_generation",
            "gauge",
            "The generation of the rules in place (1 at start, one more per reload).",
            format!(
                "agentguard_policy_generation {}\n",
                state.generation.unwrap_or(1)
            ),
        ),
        (
            "agentguard_policy_reload_failures_total",
            "counter",
            "Policy file loads refused (the rules in place stayed).",
            format!(
                "agentguard_policy_reload_failures_total {}\n",
                state.reload_failures
            ),
        ),
    ]
}

/// A label value escaped as the exposition format asks.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The proxy's audit sink with the metrics counted behind it; without a sink, the events are
/// counted only (numbered, with no chain).
pub(crate) struct Metered {
    inner: Option<Arc<dyn AuditSink>>,
    metrics: Arc<Metrics>,
    seq: AtomicU64,
}

impl Metered {
    pub(crate) fn new(inner: Option<Arc<dyn AuditSink>>, metrics: Arc<Metrics>) -> Metered {
        Metered {
            inner,
            metrics,
            seq: AtomicU64::new(0),
        }
    }
}

impl AuditSink for Metered {
    fn record(&self, event: Event) -> agentguard_audit::Result<Receipt> {
        let seen = Seen::of(&event);
        let receipt = match &self.inner {
            Some(sink) => sink.record(event)?,
            None => Receipt {
                seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
                hash: String::new(),
            },
        };
        self.metrics.count(seen);
        Ok(receipt)
    }

    fn try_record_now(&self, event: Event) -> Attempt {
        let seen = Seen::of(&event);
        let attempt = match &self.inner {
            Some(sink) => sink.try_record_now(event),
            None => return Attempt::Done(self.record(event)),
        };
        if matches!(attempt, Attempt::Done(Ok(_))) {
            self.metrics.count(seen);
        }
        attempt
    }
}

/// Serves `/metrics` and `/healthz` on `listener` until the runtime ends.
pub(crate) async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(8));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait instead of spinning.
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue;
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let _slot = slot;
            let _ = tokio::time::timeout(Duration::from_secs(5), answer(stream, &metrics)).await;
        });
    }
}

/// Reads one request head and answers it.
async fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > 8192 {
            return reply(&mut stream, "431 Request Header Fields Too Large", "").await;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => reply(&mut stream, "200 OK", &metrics.render()).await,
        ("GET", "/healthz") if metrics.draining.load(Ordering::SeqCst) => {
            reply(&mut stream, "503 Service Unavailable", "draining\n").await
        }
        ("GET", "/healthz") => reply(&mut stream, "200 OK", "ok\n").await,
        ("GET", _) => reply(&mut stream, "404 Not Found", "not found\n").await,
        _ => reply(&mut stream, "405 Method Not Allowed", "GET only\n").await,
    }
}

async fn reply(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

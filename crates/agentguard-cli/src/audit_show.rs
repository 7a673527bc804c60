//! `agentguard audit show`: the log as a reviewer reads it, verifying as it goes.
//!
//! The table says for each event what a reviewer asks first: its exit code, the run it
//! belongs to, what it was about, and its params, repeat count and refusal message (cut).
//! Filters pick events by decision, kind, time, run, command or tool; `--follow` keeps
//! reading as the log grows. Text from a client or a peer is escaped (`Escaped`).

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use agentguard_audit::{Decision, Escaped, Kind, Reader, Record, Summary};
use anyhow::Context;
use serde_json::Value;

use crate::args::{AuditShowArgs, DecisionFilter};
use crate::exit::{self, Exit};

/// How long `--follow` waits before it looks for appended lines again.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// How much of a refusal's message the table shows.
const MESSAGE_CHARS: usize = 120;

/// Which events to show.
struct Filter {
    decision: Option<Decision>,
    kind: Option<Kind>,
    since: Option<i64>,
    until: Option<i64>,
    run: Option<String>,
    command: Option<String>,
    tool: Option<String>,
}

impl Filter {
    fn from_args(args: &AuditShowArgs) -> anyhow::Result<Filter> {
        Ok(Filter {
            decision: args.decision.map(|d| match d {
                DecisionFilter::Allow => Decision::Allow,
                DecisionFilter::Deny => Decision::Deny,
                DecisionFilter::Error => Decision::Error,
            }),
            // clap offers only the names of `Kind::ALL`.
            kind: args.kind.as_deref().and_then(Kind::parse),
            since: args
                .since
                .as_deref()
                .map(|t| time("--since", t))
                .transpose()?,
            until: args
                .until
                .as_deref()
                .map(|t| time("--until", t))
                .transpose()?,
            run: args.run.clone(),
            command: args.command.clone(),
            tool: args.tool.clone(),
        })
    }

    fn keeps(&self, r: &Record) -> bool {
        let ts = || agentguard_audit::parse_millis(&r.ts).unwrap_or(i64::MIN);
        let subject = |key: &str| r.subject.get(key).and_then(Value::as_str);
        self.kind.is_none_or(|k| r.kind == k)
            && self.decision.is_none_or(|d| r.decision == d)
            && self.since.is_none_or(|since| ts() >= since)
            && self.until.is_none_or(|until| ts() < until)
            && self.run.as_deref().is_none_or(|id| run_of(r) == Some(id))
            && self
                .command
                .as_deref()
                .is_none_or(|c| subject("command") == Some(c))
            && self
                .tool
                .as_deref()
                .is_none_or(|t| subject("tool") == Some(t))
    }
}

/// A `--since`/`--until` value in milliseconds since the epoch: RFC 3339 (and its shorter
/// forms), or a span before now (`30s`, `15m`, `2h`, `7d`).
fn time(flag: &str, text: &str) -> anyhow::Result<i64> {
    if let Some(millis) = agentguard_audit::parse_millis(text) {
        return Ok(millis);
    }
    let span = text
        .char_indices()
        .last()
        .and_then(|(at, unit)| {
            let n: u64 = text[..at].parse().ok()?;
            let seconds = match unit {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                _ => return None,
            };
            n.checked_mul(seconds)
        })
        .and_then(|s| SystemTime::now().checked_sub(Duration::from_secs(s)));
    match span.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
        Some(since) => Ok(since.as_millis() as i64),
        None => Err(Exit::usage(format!(
            "{flag} {text:?} is not a time: give RFC 3339 (2026-11-29T09:00:00Z, 2026-11-29T09:00, 2026-11-29) or a span before now (30s, 15m, 2h, 7d)"
        ))
        .into()),
    }
}

/// The run an event belongs to: an egress event's `run`, a run's or call's `container`.
fn run_of(r: &Record) -> Option<&str> {
    r.subject
        .get("run")
        .or_else(|| r.data.get("container"))
        .and_then(Value::as_str)
}

/// Shows the log; the number of events shown is not limited, and with `--follow` it does
/// not end until interrupted.
pub(crate) fn show(args: &AuditShowArgs) -> anyhow::Result<u8> {
    let key = crate::config::key_from_env("--key-env", args.key_env.as_deref())?;
    let filter = Filter::from_args(args)?;
    let file = open_file(&args.file)?;
    let input: Box<dyn Read> = if args.follow {
        Box::new(Follow(file))
    } else {
        Box::new(file)
    };
    let mut reader = Reader::new(BufReader::new(input), key);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if !args.json {
        writeln!(
            out,
            "{:<6} {:<24} {:<15} {:<8} {:<22} {:<5} {:<30} SUBJECT  DETAILS",
            "SEQ", "TIME", "KIND", "DECISION", "REASON", "EXIT", "RUN"
        )?;
    }
    let mut problem = None;
    for item in reader.by_ref() {
        match item {
            Ok(record) if filter.keeps(&record) => {
                let line = if args.json {
                    serde_json::to_string(&record)?
                } else {
                    row(&record)
                };
                writeln!(out, "{line}")?;
                if args.follow {
                    out.flush()?;
                }
            }
            Ok(_) => {}
            Err(p) => problem = Some(p),
        }
    }
    out.flush()?;
    match problem {
        None => {
            if !args.json {
                let summary = describe(reader.summary());
                crate::output::note(&format!("verified: {summary}"));
            }
            Ok(exit::SUCCESS)
        }
        Some(problem) => Err(Exit::failure(format!(
            "cannot verify {} past {problem}; the {} events shown above it verified, nothing after it is shown",
            args.file.display(),
            reader.summary().events
        ))
        .into()),
    }
}

/// A file read as it grows: at its end, waits and reads again instead of ending, so a line
/// being appended is read whole once its writer finishes it.
struct Follow(File);

impl Read for Follow {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.0.read(buf)? {
                0 if !buf.is_empty() => std::thread::sleep(FOLLOW_POLL),
                n => return Ok(n),
            }
        }
    }
}

/// One table row.
fn row(record: &Record) -> String {
    // A route request's method and status say what it was; its subject says where.
    let shown_data: &[&str] = match record.kind {
        Kind::EgressRoute => &["method", "status"],
        _ => &[],
    };
    let data = shown_data
        .iter()
        .filter_map(|k| record.data.get(*k).map(|v| (k.to_string(), v)));
    let subject: Vec<String> = record
        .subject
        .iter()
        .filter(|(k, _)| k.as_str() != "run")
        .map(|(k, v)| (k.clone(), v))
        .chain(data)
        .map(|(k, v)| pair(&k, v))
        .collect();
    let exit_code = match record.data.get("exit_code") {
        Some(Value::Number(n)) => n.to_string(),
        _ => "-".into(),
    };
    format!(
        "{:<6} {:<24} {:<15} {:<8} {:<22} {:<5} {:<30} {}  {}",
        record.seq,
        record.ts,
        record.kind.as_str(),
        record.decision.as_str(),
        Escaped(&record.reason).to_string(),
        exit_code,
        Escaped(run_of(record).unwrap_or("-")).to_string(),
        subject.join(" "),
        details(record).join(" ")
    )
}

/// What a reviewer asks next: the params, how many identical refusals one event stands for,
/// and why it was refused or failed (cut).
fn details(record: &Record) -> Vec<String> {
    let mut details = Vec::new();
    if let Some(params) = record.data.get("params") {
        details.push(pair("params", params));
    }
    if let Some(repeated) = record.data.get("repeated") {
        details.push(format!("repeated={repeated}"));
    }
    if record.decision != Decision::Allow
        && let Some(Value::String(message)) = record.data.get("message")
    {
        let mut cut: String = message.chars().take(MESSAGE_CHARS).collect();
        if cut.len() < message.len() {
            cut.push('…');
        }
        let quoted = Value::String(cut).to_string();
        details.push(format!("message={}", Escaped(&quoted)));
    }
    details
}

/// `key=value`, a string shown as it is and anything else as JSON, escaped either way.
fn pair(key: &str, value: &Value) -> String {
    match value {
        Value::String(s) => format!("{}={}", Escaped(key), Escaped(s)),
        other => format!("{}={}", Escaped(key), Escaped(&other.to_string())),
    }
}

/// The log file, a regular file only (a FIFO or a device is refused at once).
pub(crate) fn open_file(path: &Path) -> anyhow::Result<File> {
    agentguard_audit::open_regular(path)
        .with_context(|| format!("opening audit log {}", path.display()))
}

pub(crate) fn describe(summary: &Summary) -> String {
    let signatures = match (summary.signed, summary.signatures_checked) {
        (true, true) => ", every HMAC verified",
        (true, false) => ", HMACs present but not checked (pass --key-env)",
        (false, _) => ", unsigned",
    };
    format!(
        "{} events, chain intact{signatures}; head seq {} hash {}",
        summary.events,
        summary.next_seq.saturating_sub(1),
        summary.head
    )
}

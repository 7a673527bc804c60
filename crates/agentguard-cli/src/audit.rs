//! `agentguard audit verify | show | repair`: the audit log on the command line.
//!
//! Verification streams the file (memory does not grow with it) and names the first bad line.
//! `show` verifies as it reads and says so, on stderr and with exit status 1, when it cannot.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use agentguard_audit::{AuditLog, Decision, Escaped, Kind, LogOptions, Reader, Record, Summary};
use anyhow::Context;

use crate::args::{AuditCommand, AuditRepairArgs, AuditShowArgs, AuditVerifyArgs, DecisionFilter};
use crate::config::key_from_env;
use crate::exit::{self, Exit};
use crate::output;

pub(crate) fn run(command: AuditCommand) -> anyhow::Result<u8> {
    match command {
        AuditCommand::Verify(args) => verify(&args),
        AuditCommand::Show(args) => show(&args),
        AuditCommand::Repair(args) => repair(&args),
    }
}

fn open(path: &Path) -> anyhow::Result<BufReader<File>> {
    let file = agentguard_audit::open_regular(path)
        .with_context(|| format!("opening audit log {}", path.display()))?;
    Ok(BufReader::new(file))
}

fn describe(summary: &Summary) -> String {
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

fn verify(args: &AuditVerifyArgs) -> anyhow::Result<u8> {
    let key = key_from_env("--key-env", args.key_env.as_deref())?;
    match agentguard_audit::verify(open(&args.file)?, key) {
        Ok(summary) => {
            output::write_lines([format!("ok: {}", describe(&summary))])?;
            Ok(exit::SUCCESS)
        }
        Err((summary, problem)) => Err(Exit::failure(format!(
            "{}: {problem} (the {} lines before it verify)",
            args.file.display(),
            summary.events
        ))
        .into()),
    }
}

fn show(args: &AuditShowArgs) -> anyhow::Result<u8> {
    let key = key_from_env("--key-env", args.key_env.as_deref())?;
    let kind = match &args.kind {
        None => None,
        Some(k) => Some(serde_json::from_value::<Kind>(serde_json::Value::String(k.clone())).map_err(|_| {
            Exit::usage(format!(
                "--kind {k:?} is not an event kind; use container_run, fetch, egress_connect, egress_close, egress_route, mcp_call or log_repaired"
            ))
        })?),
    };
    let decision = args.decision.map(|d| match d {
        DecisionFilter::Allow => Decision::Allow,
        DecisionFilter::Deny => Decision::Deny,
        DecisionFilter::Error => Decision::Error,
    });
    let keep =
        |r: &Record| kind.is_none_or(|k| r.kind == k) && decision.is_none_or(|d| r.decision == d);

    let mut reader = Reader::new(open(&args.file)?, key);
    let mut lines = Vec::new();
    if !args.json {
        lines.push(format!(
            "{:<6} {:<24} {:<15} {:<8} {:<22} SUBJECT",
            "SEQ", "TIME", "KIND", "DECISION", "REASON"
        ));
    }
    let mut problem = None;
    for item in reader.by_ref() {
        match item {
            Ok(record) if keep(&record) => lines.push(if args.json {
                serde_json::to_string(&record)?
            } else {
                row(&record)
            }),
            Ok(_) => {}
            Err(p) => problem = Some(p),
        }
    }
    output::write_lines(lines)?;
    match problem {
        None => {
            if !args.json {
                crate::output::note(&format!("verified: {}", describe(reader.summary())));
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
        .map(|(k, v)| (k.clone(), v))
        .chain(data)
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{}={}", Escaped(&k), Escaped(s)),
            other => format!("{}={other}", Escaped(&k)),
        })
        .collect();
    format!(
        "{:<6} {:<24} {:<15} {:<8} {:<22} {}",
        record.seq,
        record.ts,
        record.kind.as_str(),
        record.decision.as_str(),
        Escaped(&record.reason).to_string(),
        subject.join(" ")
    )
}

fn repair(args: &AuditRepairArgs) -> anyhow::Result<u8> {
    let key = key_from_env("--key-env", args.key_env.as_deref())?;
    let options = LogOptions {
        key,
        ..LogOptions::default()
    };
    let repair = AuditLog::repair(&args.file, options)
        .with_context(|| format!("repairing {}", args.file.display()))?;
    let message = match (repair.line, repair.recorded_seq) {
        (Some(line), Some(seq)) if repair.completed => format!(
            "repaired: line {line} was a complete record without its newline, which was restored; recorded as event {seq} (log_repaired)"
        ),
        (Some(line), Some(seq)) => format!(
            "repaired: removed the torn line {line} ({} bytes); recorded as event {seq} (log_repaired)",
            repair.removed_bytes
        ),
        _ => "intact: nothing to repair".to_owned(),
    };
    output::write_lines([message])?;
    Ok(exit::SUCCESS)
}

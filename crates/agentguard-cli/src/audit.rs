//! `agentguard audit verify | show | repair`: the audit log on the command line.
//!
//! Verification streams the file (memory does not grow with it) and names the first bad line.
//! `show` (`audit_show.rs`) verifies as it reads and says so, on stderr and with exit status 1,
//! when it cannot.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use agentguard_audit::{AuditLog, LogOptions};
use anyhow::Context;

use crate::args::{AuditCommand, AuditRepairArgs, AuditVerifyArgs};
use crate::config::key_from_env;
use crate::exit::{self, Exit};
use crate::output;

pub(crate) fn run(command: AuditCommand) -> anyhow::Result<u8> {
    match command {
        AuditCommand::Verify(args) => verify(&args),
        AuditCommand::Show(args) => crate::audit_show::show(&args),
        AuditCommand::Repair(args) => repair(&args),
    }
}

fn open(path: &Path) -> anyhow::Result<BufReader<File>> {
    Ok(BufReader::new(crate::audit_show::open_file(path)?))
}

fn verify(args: &AuditVerifyArgs) -> anyhow::Result<u8> {
    let key = key_from_env("--key-env", args.key_env.as_deref())?;
    match agentguard_audit::verify(open(&args.file)?, key) {
        Ok(summary) => {
            output::write_lines([format!("ok: {}", crate::audit_show::describe(&summary))])?;
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

//! Writing data to stdout (a closed pipe, `agentguard ... | head -1`, ends quietly) and notes
//! to stderr (never a panic when stderr cannot be written, and every control character that
//! came from a client, a peer or a container escaped).

use std::io::{self, IsTerminal, Write};

/// Writes whole lines to stdout, flushing at the end.
pub(crate) fn write_lines<I: IntoIterator<Item = String>>(lines: I) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    for line in lines {
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// True when the error chain ends in a broken pipe on stdout.
pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Writes one line to stderr, with control characters escaped; a failure to write is
/// ignored, since there is nowhere left to report it (`eprintln!` would panic). On a
/// terminal the leading `agentguard:` is shown in reverse video: a run's output reaches a
/// terminal neutralized (no escape sequence of the command's acts), so no command can print
/// a line that looks like one of these.
pub(crate) fn note(line: &str) {
    let escaped = agentguard_audit::Escaped(line).to_string();
    let stderr = io::stderr();
    let text = match escaped.strip_prefix(PREFIX) {
        Some(rest) if stderr.is_terminal() => format!("\x1b[7m{PREFIX}\x1b[0m{rest}\n"),
        _ => format!("{escaped}\n"),
    };
    let _ = stderr.lock().write_all(text.as_bytes());
}

/// How agentguard's own lines begin.
const PREFIX: &str = "agentguard:";

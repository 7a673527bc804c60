//! Writing data to stdout: a closed pipe (`agentguard ... | head -1`) ends quietly.

use std::io::{self, Write};

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

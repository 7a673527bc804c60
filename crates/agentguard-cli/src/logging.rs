//! Diagnostics to stderr through `tracing`; the only place a subscriber is installed.
//!
//! `AGENTGUARD_LOG` takes an `EnvFilter` directive (for example `agentguard_egress=debug`);
//! without it, `-v` raises the level from `warn` to `info`, `-vv` to `debug`, `-vvv` to `trace`.
//! Logs are diagnostics; decisions that must be kept go to the audit log, not here. Fields
//! may carry text from clients and containers, so every control character of an event is
//! escaped on its way to stderr (colours are off for the same reason), and a stderr that
//! cannot be written is ignored rather than fatal.
//!
//! An egress proxy writing its audit stream on stdout (`--audit-stdout`, in a cluster pod,
//! whose log holds stdout and stderr as one) writes its diagnostics into that stream instead,
//! as note lines its follower shows ([`agentguard_audit::note_line`]).

use std::io::{self, Write};

use tracing_subscriber::EnvFilter;

/// Installs the subscriber: stderr, or note lines on stdout for the stream of run `stream`.
pub(crate) fn init(verbose: u8, stream: Option<String>) {
    let filter = match std::env::var("AGENTGUARD_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::new(directives),
        _ => EnvFilter::new(match verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_target(true);
    match stream {
        // The follower shows each note under its own time.
        Some(run) => builder
            .without_time()
            .with_writer(move || Noting(run.clone()))
            .init(),
        None => builder.with_writer(|| Escaping).init(),
    }
}

/// Stdout, one event per write, as a note line of run `.0`'s audit stream.
struct Noting(String);

impl Write for Noting {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let line = agentguard_audit::note_line(&self.0, text.trim_end_matches('\n'));
        let _ = io::stdout().lock().write_all(line.as_bytes());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stdout().flush();
        Ok(())
    }
}

/// Stderr, one event per write, its control characters escaped but for the final newline.
struct Escaping;

impl Write for Escaping {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (body, newline) = match text.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (text.as_ref(), ""),
        };
        let line = format!("{}{newline}", agentguard_audit::Escaped(body));
        let _ = io::stderr().lock().write_all(line.as_bytes());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

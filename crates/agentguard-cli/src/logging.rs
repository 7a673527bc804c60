//! Diagnostics to stderr through `tracing`; the only place a subscriber is installed.
//!
//! `AGENTGUARD_LOG` takes an `EnvFilter` directive (for example `agentguard_egress=debug`);
//! without it, `-v` raises the level from `warn` to `info`, `-vv` to `debug`, `-vvv` to `trace`.
//! Logs are diagnostics; decisions that must be kept go to the audit log, not here. Fields
//! may carry text from clients and containers, so every control character of an event is
//! escaped on its way to stderr (colours are off for the same reason), and a stderr that
//! cannot be written is ignored rather than fatal.

use std::io::{self, Write};

use tracing_subscriber::EnvFilter;

/// Installs the stderr subscriber.
pub(crate) fn init(verbose: u8) {
    let filter = match std::env::var("AGENTGUARD_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::new(directives),
        _ => EnvFilter::new(match verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| Escaping)
        .with_ansi(false)
        .with_target(true)
        .init();
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

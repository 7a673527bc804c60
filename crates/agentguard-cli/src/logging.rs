//! Diagnostics to stderr through `tracing`; the only place a subscriber is installed.
//!
//! `AGENTGUARD_LOG` takes an `EnvFilter` directive (for example `agentguard_egress=debug`);
//! without it, `-v` raises the level from `warn` to `info`, `-vv` to `debug`, `-vvv` to `trace`.
//! Logs are diagnostics; decisions that must be kept go to the audit log, not here.

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
        .with_writer(std::io::stderr)
        .with_target(true)
        .init();
}

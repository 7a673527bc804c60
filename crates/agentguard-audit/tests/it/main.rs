//! Integration tests of the audit log on real files: tampering, concurrency, crashes.

mod crash;
mod file;
mod tamper;
mod writers;

use std::path::Path;

use agentguard_audit::{AuditLog, AuditSink, Decision, Event, Key, LogOptions};

/// Writes `n` events (reason `ok`, data `i`) to a new log at `path`.
pub(crate) fn write_log(path: &Path, n: u64, key: Option<Key>) {
    let log = AuditLog::open(
        path,
        LogOptions {
            key,
            ..LogOptions::default()
        },
    )
    .unwrap();
    for i in 0..n {
        log.record(
            Event::egress_connect(
                Decision::Allow,
                "ok",
                "pkgs.example.com:443",
                "127.0.0.1:40000",
            )
            .data("i", i),
        )
        .unwrap();
    }
}

pub(crate) fn key() -> Key {
    Key::new(*b"test-key-0123456789").unwrap()
}

//! The `agentguard run` TOML config loader (the agentguard-config crate the CLI and the
//! Python package share), on arbitrary text: it never panics, whatever the keys, types and
//! values.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = agentguard_config::from_text(text, std::path::Path::new("/nonexistent/agentguard.toml"));
});

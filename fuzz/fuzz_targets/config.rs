//! The `agentguard run` TOML config loader, on arbitrary text: it never panics, whatever the
//! keys, types and values (the loader is the CLI's own source file, included as a module).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/agentguard-cli/src/config.rs"]
#[allow(dead_code, unreachable_pub, unused_imports)]
mod config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = config::from_text(text, std::path::Path::new("/nonexistent/agentguard.toml"));
});

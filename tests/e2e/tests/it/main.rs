//! The isolation checks on a real engine, one `#[test]` per property. Each test skips (with a
//! loud SKIPPED line) unless `cargo xtask e2e` set `AGENTGUARD_E2E_ENGINE`; xtask runs this
//! binary once per engine/runtime combination, one test at a time, and then checks from
//! outside that nothing (no container, no gVisor sandbox) was left behind.

mod binary;
mod egress;
mod inside;
mod learn;
mod limits;
mod mcp;
mod oci;
mod oci_layout;
mod oci_runtime;
mod params;
mod receipt;
mod rootless;
mod routes;
mod workspace_paths;

/// The combination under test, or return `Ok(())` from the test after a SKIPPED line.
macro_rules! combo_or_skip {
    ($test:expr) => {
        match agentguard_e2e::Combo::from_env($test)? {
            Some(combo) => combo,
            None => return Ok(()),
        }
    };
}
pub(crate) use combo_or_skip;

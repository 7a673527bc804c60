//! Integration tests of the `agentguard` binary: output formats and exit codes as contracts.

mod audit;
mod audit_show;
mod classify;
mod cluster;
mod doctor;
mod egress;
mod egress_reload;
mod egress_run;
mod exit_codes;
mod fetch;
mod hardening;
mod init;
mod k8s;
mod learn;
mod mcp;
mod mcp_cluster;
mod mcp_wire;
mod oci;
mod params;
mod per_command;
mod policy_check;
mod proof;
mod routes;
mod run;
mod surface;

use std::process::{Command, Output};

/// Runs the real binary with the given arguments and no inherited agentguard settings.
pub(crate) fn agentguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentguard"))
        .args(args)
        .env_remove("AGENTGUARD_LOG")
        .env_remove("AGENTGUARD_CONFIG")
        .env_remove("AGENTGUARD_FLOOR")
        .output()
        .expect("the agentguard binary runs")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

//! The exit codes of `agentguard`, in one place; integration tests assert them.
//!
//! `agentguard run` will pass the command's own exit status through, like `docker run` and
//! `chroot`, so agentguard's own codes sit at the top of the range where a tool rarely lands.

use std::process::ExitCode;

/// Everything asked for was done (for `classify`: every argument was classified).
pub(crate) const SUCCESS: u8 = 0;
/// The command ran and its answer is "no": for `audit verify`, the log does not verify.
pub(crate) const FAILURE: u8 = 1;
/// The command line or its input was not understood (clap usage errors use this too).
pub(crate) const USAGE: u8 = 2;
/// `agentguard run`: the output exceeded `max_output_bytes`; the container was killed.
pub(crate) const OUTPUT_LIMIT: u8 = 122;
/// Refused by policy or by a safety limit: a host, port or address not allowed, a redirect,
/// a body over the limit.
pub(crate) const DENIED: u8 = 123;
/// A time limit was reached (for `run`, the container was killed by name).
pub(crate) const TIMEOUT: u8 = 124;
/// agentguard itself, or a container engine, failed; also a subcommand this build lacks.
pub(crate) const ERROR: u8 = 125;

/// `agentguard run` was interrupted by SIGINT; the container was killed by name.
pub(crate) const INTERRUPTED: u8 = 130;
/// `agentguard run` was stopped by SIGTERM; the container was killed by name.
pub(crate) const TERMINATED: u8 = 143;

/// Converts a code to `ExitCode`.
pub(crate) fn code(value: u8) -> ExitCode {
    ExitCode::from(value)
}

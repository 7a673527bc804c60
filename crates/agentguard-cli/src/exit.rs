//! The exit codes of `agentguard`, and the one function that maps an error to its code.
//!
//! `agentguard run` passes the command's own exit status through, like `docker run` and
//! `chroot`, so agentguard's own codes sit at the top of the range where a tool rarely lands.
//! Subcommands return typed errors (wrapped in `anyhow` with context); [`code_for`] walks the
//! chain and decides, so the same condition has the same code in every subcommand. The
//! integration tests assert every code here (`tests/it/exit_codes.rs`).

use agentguard_container::RunError;
use agentguard_netpin::FetchError;

/// Everything asked for was done (for `classify`: every argument was classified).
pub(crate) const SUCCESS: u8 = 0;
/// The command ran and its answer is "no": for `audit verify`, the log does not verify.
pub(crate) const FAILURE: u8 = 1;
/// The command line or its input was not understood (clap usage errors use this too).
pub(crate) const USAGE: u8 = 2;
/// `agentguard run`: the output exceeded `max_output_bytes`; the container was killed.
pub(crate) const OUTPUT_LIMIT: u8 = 122;
/// Refused by policy or by a safety limit: a command, host, port or address not allowed, a
/// redirect, a body over the limit.
pub(crate) const DENIED: u8 = 123;
/// A time limit was reached (for `run`, the container was killed by name).
pub(crate) const TIMEOUT: u8 = 124;
/// agentguard itself, or a container engine, failed: no engine on PATH, an engine error, a
/// resolver that cannot be built, an audit log that cannot be written.
pub(crate) const ERROR: u8 = 125;
/// `agentguard run`: the container died of a SIGKILL agentguard did not send (the memory limit only when the engine reports OOMKilled).
pub(crate) const KILLED: u8 = 137;
/// `agentguard run` was interrupted by SIGINT; the container was killed by name.
pub(crate) const INTERRUPTED: u8 = 130;
/// `agentguard run` was stopped by SIGTERM; the container was killed by name.
pub(crate) const TERMINATED: u8 = 143;

/// An error whose exit code the CLI decides itself (a usage error it found, a "no" answer).
#[derive(Debug)]
pub(crate) struct Exit {
    code: u8,
    message: String,
}

impl Exit {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Exit {
        Exit {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn failure(message: impl Into<String>) -> Exit {
        Exit::new(FAILURE, message)
    }

    pub(crate) fn usage(message: impl Into<String>) -> Exit {
        Exit::new(USAGE, message)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// The exit code for an error: decided by the outermost cause in the chain that says.
pub(crate) fn code_for(err: &anyhow::Error) -> u8 {
    err.chain().find_map(code_of).unwrap_or(ERROR)
}

fn code_of(cause: &(dyn std::error::Error + 'static)) -> Option<u8> {
    if let Some(exit) = cause.downcast_ref::<Exit>() {
        return Some(exit.code);
    }
    if let Some(denial) = cause.downcast_ref::<agentguard_policy::Denial>() {
        return Some(denial_code(denial));
    }
    if let Some(e) = cause.downcast_ref::<RunError>() {
        return Some(run_error_code(e));
    }
    if let Some(e) = cause.downcast_ref::<agentguard_sandbox::Error>() {
        return Some(match e {
            agentguard_sandbox::Error::Run(e) => run_error_code(e),
            e if e.is_config() => USAGE,
            _ => ERROR,
        });
    }
    if let Some(e) = cause.downcast_ref::<FetchError>() {
        return Some(if e.is_refusal() {
            DENIED
        } else if e.is_timeout() {
            TIMEOUT
        } else {
            ERROR
        });
    }
    if let Some(e) = cause.downcast_ref::<agentguard_container::Error>() {
        return Some(match e {
            agentguard_container::Error::NoEngine => ERROR,
            _ => USAGE,
        });
    }
    if let Some(e) = cause.downcast_ref::<agentguard_netpin::Error>() {
        return Some(match e {
            agentguard_netpin::Error::Resolver(_) => ERROR,
            _ => USAGE,
        });
    }
    if let Some(e) = cause.downcast_ref::<agentguard_egress::Error>() {
        return Some(match e {
            agentguard_egress::Error::Policy(_) | agentguard_egress::Error::Limit { .. } => USAGE,
            _ => ERROR,
        });
    }
    if let Some(e) = cause.downcast_ref::<agentguard_k8s::Error>() {
        return Some(match e {
            agentguard_k8s::Error::Invalid { .. } | agentguard_k8s::Error::Unsupported(_) => USAGE,
            _ => ERROR,
        });
    }
    if let Some(e) = cause.downcast_ref::<agentguard_kubectl::Error>() {
        return Some(match e {
            agentguard_kubectl::Error::Compile(
                agentguard_k8s::Error::Invalid { .. } | agentguard_k8s::Error::Unsupported(_),
            ) => USAGE,
            _ => ERROR,
        });
    }
    if cause.is::<agentguard_kubectl::NotAccepted>() {
        return Some(USAGE);
    }
    if let Some(e) = cause.downcast_ref::<agentguard_mcp::Error>() {
        return Some(match e {
            agentguard_mcp::Error::ToolName { .. } => USAGE,
            _ => ERROR,
        });
    }
    if cause.is::<agentguard_policy::Error>() || cause.is::<crate::config::ConfigError>() {
        return Some(USAGE);
    }
    None
}

fn run_error_code(e: &RunError) -> u8 {
    match e {
        RunError::Denied(denial) => denial_code(denial),
        // The workspace's writable or hidden paths as configured cannot be used as they are now.
        RunError::Paths(_) => USAGE,
        _ => ERROR,
    }
}

/// A value a param refused is a usage error (2), as a bad flag is; any other denial is 123.
fn denial_code(denial: &agentguard_policy::Denial) -> u8 {
    match denial.reason {
        agentguard_policy::Reason::InvalidArguments => USAGE,
        _ => DENIED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(err: impl std::error::Error + Send + Sync + 'static) -> u8 {
        code_for(&anyhow::Error::new(err).context("some context"))
    }

    #[test]
    fn one_condition_has_one_code_in_every_subcommand() {
        // A resolver that cannot be built: the same code from fetch (netpin directly) and from
        // egress-proxy (through the proxy's builder).
        let resolver = || agentguard_netpin::Error::Resolver("no resolv.conf".into());
        assert_eq!(code(resolver()), ERROR);
        assert_eq!(code(agentguard_egress::Error::Resolver(resolver())), ERROR);
        // No engine on PATH: the same code from run and from gc.
        assert_eq!(code(agentguard_container::Error::NoEngine), ERROR);
        // What the user wrote is wrong: usage.
        assert_eq!(
            code(agentguard_netpin::Error::NameServer("nonsense".into())),
            USAGE
        );
        assert_eq!(code(agentguard_policy::Error::EmptyHostAllowlist), USAGE);
        assert_eq!(code(Exit::failure("no")), FAILURE);
        assert_eq!(code(std::io::Error::other("anything else")), ERROR);
    }
}

//! Rust errors as the exceptions of `agentguard.errors`, each with the CLI's reason code.
//!
//! The classes are defined in Python (so they pickle, subclass and document like any other);
//! this module imports them and raises by name. The mapping follows the CLI's exit codes: a
//! configuration mistake (exit 2) is `ConfigError`, a `ValueError`; a refused param (2) is
//! `InvalidArguments`; a name off the allowlist (123) is `NotAllowed`; the engine (125) is
//! `EngineError`; a network refusal is `Refused`.

use std::error::Error as StdError;

use agentguard_container::RunError;
use agentguard_netpin::FetchError;
use agentguard_sandbox::Error as SandboxError;
use pyo3::prelude::*;

/// The exception `class` of `agentguard.errors`, made with `message` and `reason`.
pub(crate) fn raise(py: Python<'_>, class: &str, message: String, reason: &str) -> PyErr {
    let made = py
        .import("agentguard.errors")
        .and_then(|module| module.getattr(class))
        .and_then(|class| class.call1((message, reason)));
    match made {
        Ok(exception) => PyErr::from_value(exception),
        // The package is broken (the module or the class is missing): say so, never swallow.
        Err(e) => e,
    }
}

/// Every message of an error chain, outermost first, as `anyhow`'s `{:#}` writes them.
pub(crate) fn chain(err: &(dyn StdError + 'static)) -> String {
    agentguard_audit::error_chain(err)
}

/// A configuration that could not be loaded: `ConfigError` (a `ValueError`), unless the cause
/// is this machine (no engine, an unusable relay or runs folder): `EngineError`.
pub(crate) fn config(py: Python<'_>, err: &(dyn StdError + 'static)) -> PyErr {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(agentguard_container::Error::NoEngine) = e.downcast_ref() {
            return raise(py, "EngineError", chain(err), "engine_missing");
        }
        if let Some(e) = e.downcast_ref::<SandboxError>()
            && !e.is_config()
        {
            return raise(py, "EngineError", chain(err), e.reason());
        }
        cause = e.source();
    }
    raise(py, "ConfigError", chain(err), "invalid_config")
}

/// A run refused or failed before a result: the class by what the CLI's exit code would be.
pub(crate) fn run(py: Python<'_>, err: &SandboxError) -> PyErr {
    let class = match err {
        SandboxError::Run(RunError::Denied(denial)) => match denial.reason {
            agentguard_policy::Reason::InvalidArguments => "InvalidArguments",
            _ => "NotAllowed",
        },
        e if e.is_config() => "ConfigError",
        SandboxError::Run(RunError::Paths(_)) => "ConfigError",
        _ => "EngineError",
    };
    raise(py, class, chain(err), err.reason())
}

/// A fetch that was refused (`Refused`) or failed (`NetworkError`), with its reason code.
pub(crate) fn fetch(py: Python<'_>, err: &FetchError) -> PyErr {
    let class = if err.is_refusal() {
        "Refused"
    } else {
        "NetworkError"
    };
    raise(py, class, chain(err), err.reason())
}

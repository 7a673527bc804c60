//! What an engine's failure means: its stderr read into a typed [`RunError`] (a missing
//! image, an unknown runtime, a relay mount that failed, a daemon that is not running, an OCI
//! runtime that could not start the container, or any other engine error).

use crate::error::RunError;
use crate::kind::EngineKind;
use crate::spec::ContainerSpec;

/// The error an engine failure (exit 125, or Podman's 126 for a failed OCI runtime) means.
pub(crate) fn classify(spec: &ContainerSpec, stderr: &str) -> RunError {
    let engine = spec.engine().kind;
    let lower = stderr.to_ascii_lowercase();
    let message = stderr.trim().to_owned();
    if lower.contains("no such image")
        || lower.contains("image not known")
        || lower.contains("unable to find image")
        || lower.contains("not found in local storage")
    {
        RunError::MissingImage {
            image: spec.image().to_owned(),
            engine,
        }
    } else if lower.contains("unknown or invalid runtime")
        || lower.contains("unknown runtime")
        || lower.contains("could not find runtime")
        || lower.contains("runtime") && lower.contains("not found")
    {
        RunError::UnknownRuntime {
            runtime: spec.runtime().map_or("default", |r| r.as_str()).to_owned(),
            engine,
        }
    } else if lower.contains(crate::argv::PROXY_SOCKET_TARGET)
        || lower.contains(crate::argv::RELAY_TARGET)
    {
        RunError::RelayMount { engine, message }
    } else if lower.contains("cannot connect to the docker daemon")
        || lower.contains("is the docker daemon running")
        || lower.contains("unable to connect to podman")
    {
        RunError::EngineNotRunning { engine, message }
    } else {
        RunError::Engine { engine, message }
    }
}

/// True when the command never ran because the engine failed: 125 is the engine's own
/// failure; Podman reports an OCI runtime that failed to start the container (crun on a hybrid
/// cgroup host) as 126, so neither is an exit of the command's own.
///
/// An OCI runtime called directly (`engine = "oci"`) has no status of its own: there it is a
/// failure without the receipt (the relay, the container's init, never ran) that says so.
pub(crate) fn engine_failed(
    kind: EngineKind,
    code: Option<i32>,
    captured: &crate::capture::Captured,
) -> bool {
    let stderr = &captured.stderr;
    match kind {
        EngineKind::Oci => code != Some(0) && captured.receipt.is_none() && runtime_failed(stderr),
        _ => code == Some(125) || code == Some(126) && oci_runtime_failed(stderr),
    }
}

/// True when the engine's stderr says its OCI runtime failed to start the container (Podman:
/// `Error: OCI runtime error: ...`; Docker: `OCI runtime create failed`).
fn oci_runtime_failed(stderr: &[u8]) -> bool {
    let text = String::from_utf8_lossy(stderr).to_ascii_lowercase();
    text.contains("oci runtime error") || text.contains("oci runtime create failed")
}

/// True when an OCI runtime called directly (`engine = "oci"`) says it failed before the
/// container's init ran: runc's `runc run failed` / `runc create failed`, runsc's `running
/// container:`.
pub(crate) fn runtime_failed(stderr: &[u8]) -> bool {
    let text = String::from_utf8_lossy(stderr).to_ascii_lowercase();
    text.contains("runc run failed")
        || text.contains("runc create failed")
        || text.contains("running container:")
        || text.contains("creating container:")
}

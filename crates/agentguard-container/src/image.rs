//! The image a run uses: its ID read from the engine just before the run, and the spec's pin
//! checked against it; the run then names the image by that ID, so what its event records is
//! what the engine ran.

use crate::classify::classify;
use crate::error::RunError;
use crate::kind::EngineKind;
use crate::process::run_quiet;
use crate::spec::{ContainerSpec, ImagePin};

/// The ID of the image a run of `spec` uses, read from the engine, and the spec's pin checked
/// against it (`name@sha256:...`: one of its repo digests; `sha256:<id>`: its ID). Returns the
/// ID as the engine printed it (Docker `sha256:<id>`, Podman the bare ID), which the run then
/// names instead of the reference.
pub(crate) async fn resolve(spec: &ContainerSpec) -> Result<String, RunError> {
    if spec.engine().kind == EngineKind::Oci {
        return crate::oci::image::resolve(spec).await;
    }
    inspect(spec, &spec.engine_command(&inspect_args(spec.image()))).await
}

/// The arguments of the engine command that reads an image's ID and repo digests.
pub(crate) fn inspect_args(image: &str) -> [&str; 5] {
    [
        "image",
        "inspect",
        "--format",
        "{{.Id}}|{{json .RepoDigests}}",
        image,
    ]
}

/// The ID `command` (an engine's [`inspect_args`]) reads for the spec's image, its pin
/// checked.
pub(crate) async fn inspect(
    spec: &ContainerSpec,
    command: &crate::argv::EngineCommand,
) -> Result<String, RunError> {
    let image = spec.image();
    let output = run_quiet(command).await.map_err(|source| RunError::Io {
        action: "inspecting the image",
        source,
    })?;
    if !output.status.success() {
        return Err(classify(spec, &String::from_utf8_lossy(&output.stderr)));
    }
    let seen = String::from_utf8_lossy(&output.stdout);
    let (id, digests) = seen.trim().split_once('|').unwrap_or((seen.trim(), ""));
    let bare = id.trim_start_matches("sha256:");
    if bare.len() < 12 || !bare.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(RunError::ImagePin {
            image: image.to_owned(),
            reason: format!("the engine gave no image ID for it ({:?})", seen.trim()),
        });
    }
    let matches = match spec.image_pin() {
        ImagePin::Tag => true,
        ImagePin::Id(want) => bare == want.trim_start_matches("sha256:"),
        ImagePin::Digest(want) => digests.contains(&format!("@sha256:{want}")),
    };
    if matches {
        Ok(id.to_owned())
    } else {
        Err(RunError::ImagePin {
            image: image.to_owned(),
            reason: format!("the local image has {}", seen.trim()),
        })
    }
}

/// An image ID as records and fixes give it, `sha256:<id>`, whichever form the engine printed
/// (Docker `sha256:<id>`, Podman the bare ID).
pub(crate) fn recorded_id(id: &str) -> String {
    format!("sha256:{}", id.trim_start_matches("sha256:"))
}

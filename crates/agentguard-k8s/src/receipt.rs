//! The isolation receipt on a cluster: the same static relay as a local run's is the run
//! container's entrypoint (`RELAY_TARGET --receipt UID:GID --cluster -- ARGV`), so the pod is
//! checked from inside before the command exists. The relay comes from `[kubernetes]
//! proxy_image`: an init container, hardened as the run's, has that image's agentguard write
//! the relay it embeds (`agentguard k8s relay PATH`) into a memory emptyDir, which the run
//! container mounts read-only. The relay then writes the receipt as its first line, which the
//! pod's log carries back.

use agentguard_container::{ContainerSpec, RELAY_TARGET};
use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::error::{Error, Result};
use crate::model::{literal_argv, pull_policy, resources, restricted_container};
use crate::settings::K8sSettings;

/// The init container that writes the relay.
pub const RELAY_CONTAINER: &str = "relay";
/// The volume the relay is written to.
const VOLUME: &str = "agentguard-relay";
/// The relay's folder in both containers.
const FOLDER: &str = "/run/agentguard";
/// The volume's size limit: the relay is about 1.5 MB.
const VOLUME_SIZE: &str = "16Mi";
/// What the init container may take: agentguard writing one file.
const INIT_CPU: &str = "100m";
const INIT_MEMORY: &str = "64Mi";

/// The pieces a run's pod gains for its receipt.
pub(crate) struct RelayParts {
    /// The init container writing the relay.
    pub(crate) init: Container,
    /// The emptyDir it is written to.
    pub(crate) volume: Volume,
    /// The run container's read-only mount of it.
    pub(crate) mount: VolumeMount,
    /// The run container's command: the relay, its arguments, then the command's argv.
    pub(crate) command: Vec<String>,
}

/// The relay's init container, volume and mount, and `argv` behind the relay, for `spec`.
pub(crate) fn relay_parts(
    spec: &ContainerSpec,
    settings: &K8sSettings,
    argv: &[String],
) -> Result<RelayParts> {
    debug_assert!(RELAY_TARGET.starts_with(FOLDER));
    let Some(image) = &settings.proxy_image else {
        return Err(Error::Unsupported(
            "every run on a cluster takes an isolation receipt with the relay of [kubernetes] proxy_image, which is not set; set it to an image with agentguard on its PATH (docs/kubernetes.md, \"The proxy image\")".into(),
        ));
    };
    let mount = |read_only: bool| VolumeMount {
        name: VOLUME.into(),
        mount_path: FOLDER.into(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    };
    let init = Container {
        name: RELAY_CONTAINER.into(),
        image: Some(image.clone()),
        image_pull_policy: Some(pull_policy(image).into()),
        command: Some(vec![
            "agentguard".into(),
            "k8s".into(),
            "relay".into(),
            RELAY_TARGET.into(),
        ]),
        resources: Some(resources(INIT_CPU, INIT_MEMORY)),
        security_context: Some(restricted_container()),
        volume_mounts: Some(vec![mount(false)]),
        ..Container::default()
    };
    let volume = Volume {
        name: VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(Quantity(VOLUME_SIZE.into())),
        }),
        ..Volume::default()
    };
    let mut command = vec![
        RELAY_TARGET.to_owned(),
        "--receipt".into(),
        spec.user().to_string(),
        "--cluster".into(),
        "--".into(),
    ];
    command.extend(literal_argv(argv));
    Ok(RelayParts {
        init,
        volume,
        mount: mount(true),
        command,
    })
}

//! The image of an `engine = "oci"` run: its ID, then its root file system in the cache.
//!
//! A `sha256:<id>` pin whose entry the cache holds needs nothing else: no store is asked.
//! Otherwise the local Docker store, then Podman's, is asked for the image's ID (the pin
//! checked as for those engines); a cache miss then saves the image from that store
//! (`save`, never a pull), checks the config's SHA-256 against the ID and each layer's against
//! the config's `rootfs.diff_ids`, and unpacks the layers in order. An image layout directory
//! (`oci:PATH`) is read by the layout module instead, asking no store.

use std::path::Path;

use serde_json::Value;

use super::cache::{self, Building, Entry};
use super::unpack::{apply_layer, sha256_file};
use crate::engine::Engine;
use crate::error::RunError;
use crate::image::{inspect, inspect_args};
use crate::spec::{ContainerSpec, ImagePin};

/// How long saving an image from its store may take.
const SAVE_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// The ID (`sha256:<hex>`) of the spec's image, with its root file system in the cache.
pub(crate) async fn resolve(spec: &ContainerSpec) -> Result<String, RunError> {
    let image = spec.image().to_owned();
    let failed = |reason: String| RunError::ImageCache {
        image: image.clone(),
        reason,
    };
    let root = cache::cache_root();
    let images = tokio::task::spawn_blocking(move || cache::open(&root))
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(&failed)?;
    if let Some(layout) = crate::spec::layout(spec.image()) {
        let layout = layout.map_err(&failed)?;
        return tokio::task::spawn_blocking(move || super::layout::resolve(&layout, &images))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(&failed);
    }
    if let ImagePin::Id(want) = spec.image_pin() {
        let bare = want.trim_start_matches("sha256:");
        if bare.len() == 64 && cache::lookup(&images, bare).is_some() {
            return Ok(format!("sha256:{bare}"));
        }
    }
    let (store, id) = find(spec).await?;
    let bare = id.trim_start_matches("sha256:").to_owned();
    if cache::lookup(&images, &bare).is_none() {
        unpack(&store, &images, &bare).await.map_err(&failed)?;
    }
    Ok(format!("sha256:{bare}"))
}

/// The cached entry of an image ID that [`resolve`] returned.
pub(crate) fn entry(id: &str) -> Option<Entry> {
    let images = cache::cache_root().join("images");
    cache::lookup(&images, id.trim_start_matches("sha256:"))
}

/// The first local store (Docker, then Podman) that holds the image, and its ID there.
async fn find(spec: &ContainerSpec) -> Result<(Engine, String), RunError> {
    let stores = Engine::installed();
    let mut last = None;
    for store in stores {
        let command = store.command(&[], &inspect_args(spec.image()));
        match inspect(spec, &command).await {
            Ok(id) => return Ok((store, id)),
            Err(RunError::MissingImage { image, .. }) => {
                last = Some(RunError::MissingImage {
                    image,
                    engine: store.kind,
                })
            }
            Err(RunError::EngineNotRunning { .. }) => {}
            Err(other) => return Err(other),
        }
    }
    Err(last.unwrap_or_else(|| RunError::ImageCache {
        image: spec.image().to_owned(),
        reason: "no local image store answered (engine = \"oci\" takes images from Docker's or Podman's store; install one and load the image there)".to_owned(),
    }))
}

/// Saves image `id` from `store` and unpacks it into the cache.
async fn unpack(store: &Engine, images: &Path, id: &str) -> Result<(), String> {
    let building = Building::start(images, id)?;
    let archive = building.dir.join("image.tar");
    let file = std::fs::File::create(&archive)
        .map_err(|e| format!("making {}: {e}", archive.display()))?;
    let save = store.command(&[], &["save", &format!("sha256:{id}")]);
    let output = tokio::time::timeout(SAVE_LIMIT, crate::process::run_into(&save, file))
        .await
        .map_err(|_| format!("`{}` did not finish in {SAVE_LIMIT:?}", save.display()))?
        .map_err(|e| format!("`{}`: {e}", save.display()))?;
    if !output.status.success() {
        return Err(format!(
            "`{}` failed: {}",
            save.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let (images, id) = (images.to_owned(), id.to_owned());
    tokio::task::spawn_blocking(move || build(building, &images, &id))
        .await
        .map_err(|e| e.to_string())?
}

/// Reads a saved image (`docker save` / `podman save` format), verifies it, and puts its
/// unpacked root file system in place.
fn build(building: Building, images: &Path, id: &str) -> Result<(), String> {
    let saved = building.dir.join("saved");
    let archive = building.dir.join("image.tar");
    std::fs::create_dir(&saved).map_err(|e| e.to_string())?;
    let file = std::fs::File::open(&archive).map_err(|e| e.to_string())?;
    tar::Archive::new(file)
        .unpack(&saved)
        .map_err(|e| format!("reading the saved image: {e}"))?;
    std::fs::remove_file(&archive).map_err(|e| e.to_string())?;
    let manifest: Value = read_json(&saved.join("manifest.json"))?;
    let item = manifest
        .as_array()
        .and_then(|items| {
            items.iter().find(|item| {
                item["Config"]
                    .as_str()
                    .is_some_and(|c| c.trim_end_matches(".json").ends_with(id))
            })
        })
        .ok_or_else(|| format!("the saved image's manifest.json names no config sha256:{id}"))?;
    let config_path = saved.join(item["Config"].as_str().unwrap_or_default());
    let seen = sha256_file(&config_path).map_err(|e| format!("reading the config: {e}"))?;
    if seen != id {
        return Err(format!(
            "the saved config has sha256:{seen}, not the image ID sha256:{id}"
        ));
    }
    let config: Value = read_json(&config_path)?;
    let diff_ids: Vec<String> = cache::strings(&config["rootfs"]["diff_ids"]);
    let layers: Vec<String> = cache::strings(&item["Layers"]);
    if diff_ids.len() != layers.len() {
        return Err(format!(
            "the image's config lists {} layers, its manifest {}",
            diff_ids.len(),
            layers.len()
        ));
    }
    let rootfs = building.dir.join("rootfs");
    for (layer, diff_id) in layers.iter().zip(&diff_ids) {
        if layer.contains("..") || layer.starts_with('/') {
            return Err(format!(
                "the manifest names the layer {layer:?} outside the image"
            ));
        }
        apply_layer(&rootfs, &saved.join(layer), diff_id)?;
    }
    std::fs::remove_dir_all(&saved).map_err(|e| e.to_string())?;
    let env = cache::strings(&config["config"]["Env"]);
    building.finish(images, id, env, &diff_ids, None).map(drop)
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The cache entries no local store holds any more (and folders left half built by a process
/// that is gone): found, and unless `dry_run`, removed. An entry whose image a store still
/// holds is kept, so a later run of that ID needs no unpack.
pub async fn sweep_cache(dry_run: bool) -> std::io::Result<Vec<crate::gc::Stale>> {
    let images = cache::cache_root().join("images");
    let listed = match std::fs::read_dir(&images) {
        Ok(listed) => listed,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let stores = Engine::installed();
    let mut stale = Vec::new();
    for entry in listed.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let why = match name.strip_prefix(".building-") {
            // `.building-<id>-<pid>-<n>`: the builder's pid is the second field from the end.
            Some(rest) => {
                let pid = rest.rsplit('-').nth(1).unwrap_or_default();
                crate::gc::owner_gone(pid, "")
            }
            // From a layout: kept while the layout is there.
            None if cache::layout_of(&images, &name)
                .is_some_and(|d| d.join("index.json").is_file()) =>
            {
                None
            }
            None => {
                let mut held = false;
                for store in &stores {
                    let args = [
                        "image",
                        "inspect",
                        "--format",
                        "{{.Id}}",
                        &format!("sha256:{name}"),
                    ];
                    let out = crate::process::run_quiet(&store.command(&[], &args)).await?;
                    held |= out.status.success();
                }
                (!held).then(|| "no local image store holds it".to_owned())
            }
        };
        if let Some(why) = why {
            if !dry_run {
                std::fs::remove_dir_all(entry.path())?;
            }
            stale.push(crate::gc::Stale { name, why });
        }
    }
    Ok(stale)
}

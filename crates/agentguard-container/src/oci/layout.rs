//! An OCI image layout directory as the image of an `engine = "oci"` run: `image =
//! "oci:PATH"`, `"oci:PATH:TAG"` or `"oci:PATH@sha256:<manifest digest>"`.
//!
//! `index.json` names the manifest (by its `org.opencontainers.image.ref.name` tag, by its
//! digest, or as the only one); an image index inside it is narrowed to this machine's
//! platform. Every blob is checked against its descriptor's size and digest as it is read,
//! once: JSON blobs in memory, layers while they are copied (and, when gzip-compressed,
//! uncompressed) into the cache's private building folder, where each is then checked again
//! against the config's `rootfs.diff_ids` and applied. The config's digest is the image ID the
//! cache keys on. Nothing is fetched.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::cache::{self, Building};
use super::unpack::{apply_layer, hex};
use crate::spec::{Layout, LayoutSelect};

const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The largest JSON blob (index, manifest, config) read into memory.
const JSON_LIMIT: u64 = 4 * 1024 * 1024;

/// A blob the layout names: its media type, digest (bare hex) and size.
struct Descriptor {
    media_type: String,
    hex: String,
    size: u64,
}

impl Descriptor {
    fn of(value: &Value) -> Result<Descriptor, String> {
        let digest = value["digest"].as_str().unwrap_or_default();
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .ok_or_else(|| {
                format!("a descriptor's digest {digest:?} is not sha256:<64 lower-case hex digits>")
            })?;
        Ok(Descriptor {
            media_type: value["mediaType"].as_str().unwrap_or_default().to_owned(),
            hex: hex.to_owned(),
            size: value["size"]
                .as_u64()
                .ok_or_else(|| format!("the descriptor of sha256:{hex} has no size"))?,
        })
    }
}

/// A layout's image, its blobs checked: the ID (the config's digest, bare hex), the config and
/// the layers.
pub(crate) struct Image {
    pub(crate) id: String,
    config: Value,
    layers: Vec<Descriptor>,
}

/// Reads and checks the image `layout` names, up to its layers' descriptors.
pub(crate) fn read(layout: &Layout) -> Result<Image, String> {
    let dir = &layout.dir;
    let marker = json(&std::fs::read(dir.join("oci-layout")).map_err(|e| {
        format!(
            "{} is not an OCI image layout (no oci-layout file: {e})",
            dir.display()
        )
    })?)?;
    if marker["imageLayoutVersion"].as_str() != Some("1.0.0") {
        return Err(format!(
            "{}/oci-layout says imageLayoutVersion {}, not \"1.0.0\"",
            dir.display(),
            marker["imageLayoutVersion"]
        ));
    }
    let index = json(&read_limited(&dir.join("index.json"))?)?;
    let mut chosen = Descriptor::of(choose(&index, &layout.select)?)?;
    if chosen.media_type == INDEX {
        let nested = json(&read_blob(dir, &chosen)?)?;
        chosen = Descriptor::of(platform(&nested)?)?;
    }
    if chosen.media_type != MANIFEST {
        return Err(format!(
            "the manifest sha256:{} is {:?}; an OCI image manifest ({MANIFEST}) is needed",
            chosen.hex, chosen.media_type
        ));
    }
    let manifest = json(&read_blob(dir, &chosen)?)?;
    let config_descriptor = Descriptor::of(&manifest["config"])?;
    let config = json(&read_blob(dir, &config_descriptor)?)?;
    let layers = manifest["layers"]
        .as_array()
        .ok_or("the manifest lists no layers")?
        .iter()
        .map(Descriptor::of)
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(other) = layers
        .iter()
        .find(|l| l.media_type != LAYER_TAR && l.media_type != LAYER_GZIP)
    {
        return Err(format!(
            "layer sha256:{} is {:?}; only {LAYER_TAR} and {LAYER_GZIP} are unpacked",
            other.hex, other.media_type
        ));
    }
    Ok(Image {
        id: config_descriptor.hex,
        config,
        layers,
    })
}

/// The one manifest of `index` that `select` names.
fn choose<'a>(index: &'a Value, select: &LayoutSelect) -> Result<&'a Value, String> {
    let manifests = index["manifests"].as_array().map_or(&[][..], Vec::as_slice);
    let tag = |m: &Value| m["annotations"][REF_NAME].as_str().map(str::to_owned);
    let (found, what): (Vec<&Value>, String) = match select {
        LayoutSelect::Only => (manifests.iter().collect(), "in all".into()),
        LayoutSelect::Tag(t) => (
            manifests
                .iter()
                .filter(|m| tag(m).as_deref() == Some(t))
                .collect(),
            format!("tagged {t:?}"),
        ),
        LayoutSelect::Digest(h) => (
            manifests
                .iter()
                .filter(|m| m["digest"].as_str() == Some(&format!("sha256:{h}")))
                .collect(),
            format!("with digest sha256:{h}"),
        ),
    };
    match found.as_slice() {
        [one] => Ok(one),
        _ => {
            let tags: Vec<String> = manifests.iter().filter_map(tag).collect();
            Err(format!(
                "index.json has {} manifests {what} (one is needed; its tags: {}); name one as oci:PATH:TAG or oci:PATH@sha256:<digest>",
                found.len(),
                if tags.is_empty() {
                    "none".to_owned()
                } else {
                    tags.join(", ")
                }
            ))
        }
    }
}

/// The manifest of an image index for this machine (linux and its architecture).
fn platform(index: &Value) -> Result<&Value, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["platform"]["os"] == "linux" && m["platform"]["architecture"] == arch)
        .ok_or_else(|| format!("the image index has no manifest for linux/{arch}"))
}

fn json(bytes: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("a JSON file of the layout: {e}"))
}

fn read_limited(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(JSON_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if bytes.len() as u64 > JSON_LIMIT {
        return Err(format!("{} is over {JSON_LIMIT} bytes", path.display()));
    }
    Ok(bytes)
}

fn blob_path(dir: &Path, blob: &Descriptor) -> PathBuf {
    dir.join("blobs/sha256").join(&blob.hex)
}

/// A JSON blob, read once and checked against its descriptor's size and digest.
fn read_blob(dir: &Path, blob: &Descriptor) -> Result<Vec<u8>, String> {
    let bytes = read_limited(&blob_path(dir, blob))?;
    check(blob, bytes.len() as u64, &hex(&Sha256::digest(&bytes)))?;
    Ok(bytes)
}

fn check(blob: &Descriptor, size: u64, seen: &str) -> Result<(), String> {
    if size != blob.size || seen != blob.hex {
        return Err(format!(
            "blob sha256:{} of the layout has {size} bytes and sha256:{seen}; its descriptor says {} bytes",
            blob.hex, blob.size
        ));
    }
    Ok(())
}

/// The image's ID (`sha256:<hex>`), its root file system unpacked into the cache `images` if
/// it is not there yet.
pub(crate) fn resolve(layout: &Layout, images: &Path) -> Result<String, String> {
    let image = read(layout)?;
    if cache::lookup(images, &image.id).is_none() {
        build(&image, &layout.dir, images)?;
    }
    Ok(format!("sha256:{}", image.id))
}

fn build(image: &Image, dir: &Path, images: &Path) -> Result<(), String> {
    let diff_ids: Vec<String> = cache::strings(&image.config["rootfs"]["diff_ids"]);
    if diff_ids.len() != image.layers.len() {
        return Err(format!(
            "the image's config lists {} layers, its manifest {}",
            diff_ids.len(),
            image.layers.len()
        ));
    }
    let building = Building::start(images, &image.id)?;
    let rootfs = building.dir.join("rootfs");
    for (i, (layer, diff_id)) in image.layers.iter().zip(&diff_ids).enumerate() {
        let tar = building.dir.join(format!("layer-{i}.tar"));
        copy_checked(&blob_path(dir, layer), layer, &tar)?;
        apply_layer(&rootfs, &tar, diff_id)?;
        std::fs::remove_file(&tar).map_err(|e| format!("removing {}: {e}", tar.display()))?;
    }
    let env = cache::strings(&image.config["config"]["Env"]);
    let source = format!("oci:{}", dir.display());
    building
        .finish(images, &image.id, env, &diff_ids, Some(&source))
        .map(drop)
}

/// Copies layer blob `from` to `to` (uncompressing a gzip layer), reading it once and checking
/// the bytes read against its descriptor.
fn copy_checked(from: &Path, layer: &Descriptor, to: &Path) -> Result<(), String> {
    let file = std::fs::File::open(from).map_err(|e| format!("reading {}: {e}", from.display()))?;
    let mut hashing = Hashing {
        // One byte past the descriptor's size is enough to refuse a longer blob (or a link
        // to an endless file) without reading it all.
        inner: file.take(layer.size.saturating_add(1)),
        hasher: Sha256::new(),
        size: 0,
    };
    let mut out = std::fs::File::create(to).map_err(|e| format!("making {}: {e}", to.display()))?;
    let failed = |e: std::io::Error| format!("reading layer sha256:{}: {e}", layer.hex);
    if layer.media_type == LAYER_GZIP {
        let mut gzip = flate2::read::MultiGzDecoder::new(&mut hashing);
        std::io::copy(&mut gzip, &mut out).map_err(failed)?;
        // Whatever follows the compressed stream still counts toward the digest.
        std::io::copy(&mut hashing, &mut std::io::sink()).map_err(failed)?;
    } else {
        std::io::copy(&mut hashing, &mut out).map_err(failed)?;
    }
    out.flush().map_err(failed)?;
    check(layer, hashing.size, &hex(&hashing.hasher.finalize()))
}

/// A reader that hashes and counts what it reads.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    size: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;

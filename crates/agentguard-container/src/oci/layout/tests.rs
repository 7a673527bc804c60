//! The layout reader on layouts written here: a manifest named by tag, digest or alone, an
//! image index narrowed to this platform, plain and gzip layers with a whiteout, and a changed
//! blob or a layer type it does not unpack refused with nothing cached.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{LAYER_GZIP, LAYER_TAR, MANIFEST, resolve};
use crate::oci::cache;
use crate::oci::unpack::hex;
use crate::oci::unpack::tests::layer;
use crate::spec::{Layout, LayoutSelect, layout};

/// Writes `bytes` as a blob of the layout `dir`; its descriptor.
fn blob(dir: &Path, media_type: &str, bytes: &[u8]) -> Value {
    let digest = hex(&Sha256::digest(bytes));
    std::fs::write(dir.join("blobs/sha256").join(&digest), bytes).unwrap();
    json!({"mediaType": media_type, "digest": format!("sha256:{digest}"), "size": bytes.len()})
}

/// A layout in `dir` with two layers (a plain tar; a gzip tar that whites one file out), an
/// index whose one manifest is tagged `v1`; the manifest's and the config's descriptors.
fn make_layout(dir: &Path, scratch: &Path, media_two: &str) -> (Value, Value) {
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let files: &[(&str, Option<&[u8]>)] =
        &[("etc/", None), ("etc/a", Some(b"a")), ("etc/b", Some(b"b"))];
    let (one, one_id) = layer(scratch, "1.tar", files);
    let (two, two_id) = layer(scratch, "2.tar", &[("etc/.wh.a", Some(b""))]);
    let mut two = std::fs::read(two).unwrap();
    if media_two != LAYER_TAR {
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&two).unwrap();
        two = gzip.finish().unwrap();
    }
    let layers = [
        blob(dir, LAYER_TAR, &std::fs::read(one).unwrap()),
        blob(dir, media_two, &two),
    ];
    let config = json!({"config": {"Env": ["PATH=/bin"]}, "rootfs": {"type": "layers", "diff_ids": [one_id, two_id]}});
    let config = blob(
        dir,
        "application/vnd.oci.image.config.v1+json",
        config.to_string().as_bytes(),
    );
    let manifest =
        json!({"schemaVersion": 2, "mediaType": MANIFEST, "config": config, "layers": layers});
    let mut manifest = blob(dir, MANIFEST, manifest.to_string().as_bytes());
    manifest["annotations"] = json!({"org.opencontainers.image.ref.name": "v1"});
    let index = json!({"schemaVersion": 2, "manifests": [manifest]});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
    (manifest, config)
}

fn parsed(image: &str) -> Layout {
    layout(image).unwrap().unwrap()
}

#[test]
fn a_layout_is_named_by_tag_digest_or_alone_and_unpacked_with_its_whiteouts() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("layout");
    let (manifest, config) = make_layout(&dir, temp.path(), LAYER_GZIP);
    let images = cache::open(&temp.path().join("cache")).unwrap();
    let d = dir.display();
    let id = resolve(&parsed(&format!("oci:{d}:v1")), &images).unwrap();
    assert_eq!(id, config["digest"], "the image ID is the config's digest");
    let bare = id.trim_start_matches("sha256:");
    let entry = cache::lookup(&images, bare).unwrap();
    assert!(
        !entry.rootfs().join("etc/a").exists(),
        "whited out by the gzip layer"
    );
    assert_eq!(std::fs::read(entry.rootfs().join("etc/b")).unwrap(), b"b");
    assert_eq!(entry.env, ["PATH=/bin"]);
    assert_eq!(
        cache::layout_of(&images, bare),
        Some(dir.clone()),
        "kept while the layout is"
    );
    let digest = manifest["digest"].as_str().unwrap();
    for other in [format!("oci:{d}"), format!("oci:{d}@{digest}")] {
        assert_eq!(resolve(&parsed(&other), &images).unwrap(), id, "{other}");
    }
    let error = resolve(&parsed(&format!("oci:{d}:v2")), &images).unwrap_err();
    assert!(
        error.contains("0 manifests tagged \"v2\"") && error.contains("tags: v1"),
        "{error}"
    );
}

#[test]
fn a_changed_blob_or_an_unknown_layer_type_is_refused_and_nothing_is_cached() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("layout");
    let (manifest, _) = make_layout(&dir, temp.path(), LAYER_GZIP);
    let images = cache::open(&temp.path().join("cache")).unwrap();
    // One byte of the plain layer changed (in its end padding, so the tar still reads): its
    // digest no longer matches.
    let layers = std::fs::read(
        dir.join("blobs/sha256")
            .join(&manifest["digest"].as_str().unwrap()[7..]),
    )
    .unwrap();
    let layers: Value = serde_json::from_slice(&layers).unwrap();
    let plain = dir
        .join("blobs/sha256")
        .join(&layers["layers"][0]["digest"].as_str().unwrap()[7..]);
    let mut bytes = std::fs::read(&plain).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&plain, bytes).unwrap();
    let error = resolve(&parsed(&format!("oci:{}", dir.display())), &images).unwrap_err();
    assert!(error.contains("its descriptor says"), "{error}");
    assert_eq!(
        std::fs::read_dir(&images).unwrap().count(),
        0,
        "no entry, no half-built folder"
    );
    // A layer type that is not unpacked (zstd) is named.
    let other = temp.path().join("zstd");
    make_layout(
        &other,
        temp.path(),
        "application/vnd.oci.image.layer.v1.tar+zstd",
    );
    let error = resolve(&parsed(&format!("oci:{}", other.display())), &images).unwrap_err();
    assert!(error.contains("tar+zstd\"; only"), "{error}");
}

#[test]
fn an_image_index_is_narrowed_to_this_machines_platform() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("layout");
    let (manifest, config) = make_layout(&dir, temp.path(), LAYER_TAR);
    let arch = if cfg!(target_arch = "x86_64") {
        "amd64"
    } else {
        "arm64"
    };
    let mut native = manifest.clone();
    native["platform"] = json!({"os": "linux", "architecture": arch});
    let mut foreign =
        json!({"mediaType": MANIFEST, "digest": format!("sha256:{}", "0".repeat(64)), "size": 2});
    foreign["platform"] = json!({"os": "linux", "architecture": "s390x"});
    let nested = json!({"schemaVersion": 2, "manifests": [foreign, native]});
    let nested = blob(
        &dir,
        "application/vnd.oci.image.index.v1+json",
        nested.to_string().as_bytes(),
    );
    std::fs::write(
        dir.join("index.json"),
        json!({"manifests": [nested]}).to_string(),
    )
    .unwrap();
    let images = cache::open(&temp.path().join("cache")).unwrap();
    let id = resolve(&parsed(&format!("oci:{}", dir.display())), &images).unwrap();
    assert_eq!(id, config["digest"]);
}

#[test]
fn a_layout_reference_is_absolute_and_its_tag_follows_the_last_colon() {
    let tagged = parsed("oci:/srv/a:b/images:v1.2");
    assert_eq!(tagged.dir, Path::new("/srv/a:b/images"));
    assert_eq!(tagged.select, LayoutSelect::Tag("v1.2".into()));
    assert_eq!(parsed("oci:/srv/images").select, LayoutSelect::Only);
    let hex = "ab".repeat(32);
    let pinned = parsed(&format!("oci:/srv/images@sha256:{hex}"));
    assert_eq!(pinned.select, LayoutSelect::Digest(hex));
    for bad in ["oci:images", "oci:/srv/../etc", "oci:/srv/images:"] {
        assert!(layout(bad).unwrap().is_err(), "{bad}");
    }
    assert!(layout("localhost/tools:1").is_none());
}

#[test]
fn a_layer_that_is_a_link_to_an_endless_file_is_read_only_past_its_size() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("layout");
    let (manifest, _) = make_layout(&dir, temp.path(), LAYER_TAR);
    let text = std::fs::read(
        dir.join("blobs/sha256")
            .join(&manifest["digest"].as_str().unwrap()[7..]),
    );
    let layers: Value = serde_json::from_slice(&text.unwrap()).unwrap();
    let plain = dir
        .join("blobs/sha256")
        .join(&layers["layers"][0]["digest"].as_str().unwrap()[7..]);
    std::fs::remove_file(&plain).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &plain).unwrap();
    let images = cache::open(&temp.path().join("cache")).unwrap();
    let error = resolve(&parsed(&format!("oci:{}", dir.display())), &images).unwrap_err();
    let size = layers["layers"][0]["size"].as_u64().unwrap();
    assert!(
        error.contains(&format!("has {} bytes", size + 1)),
        "{error}"
    );
}

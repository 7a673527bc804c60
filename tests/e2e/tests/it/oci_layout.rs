//! `engine = "oci"` only: an image from an OCI image layout directory (`image =
//! "oci:PATH:TAG"`). The probe image saved from Docker's store is rewritten as a layout with
//! its first layer gzip-compressed and one more variable in its config (so its ID is one no
//! store holds); a run from it sees that variable, its cache entry names the layout, `gc`
//! keeps the entry while the layout is there and removes it once the layout is gone.

use std::path::Path;
use std::process::Command;

use agentguard_container::EngineKind;
use agentguard_e2e::{Folder, output};
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::combo_or_skip;

/// Writes `bytes` as a blob of `layout`; its descriptor.
fn blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Result<Value> {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(layout.join("blobs/sha256").join(&hex), bytes)?;
    Ok(json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()}))
}

/// The probe image as an OCI layout in `layout`, tagged `probe`, built from `docker save`'s
/// archive unpacked in `saved`; returns the new image ID and how many layers it has.
fn make_layout(image: &str, saved: &Path, layout: &Path) -> Result<(String, usize)> {
    let archive = saved.join("image.tar");
    let out = output(
        "docker",
        &["save", "-o", archive.to_str().context("path")?, image],
    )?;
    ensure!(
        out.status.success(),
        "docker save: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = output(
        "tar",
        &[
            "-xf",
            archive.to_str().context("path")?,
            "-C",
            saved.to_str().context("path")?,
        ],
    )?;
    ensure!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Value = serde_json::from_slice(&std::fs::read(saved.join("manifest.json"))?)?;
    let item = &manifest[0];
    let mut config: Value = serde_json::from_slice(&std::fs::read(
        saved.join(item["Config"].as_str().context("Config")?),
    )?)?;
    // The probe image (made by `docker import`) may have no environment at all.
    let mut env = config["config"]["Env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    env.push("FROM_LAYOUT=yes".into());
    config["config"]["Env"] = env.into();
    std::fs::create_dir_all(layout.join("blobs/sha256"))?;
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    let mut layers = Vec::new();
    for (i, layer) in item["Layers"]
        .as_array()
        .context("Layers")?
        .iter()
        .enumerate()
    {
        let path = saved.join(layer.as_str().context("layer")?);
        if i == 0 {
            let gzip = output("gzip", &["-n", "-c", path.to_str().context("path")?])?;
            ensure!(gzip.status.success(), "gzip failed");
            layers.push(blob(
                layout,
                "application/vnd.oci.image.layer.v1.tar+gzip",
                &gzip.stdout,
            )?);
        } else {
            layers.push(blob(
                layout,
                "application/vnd.oci.image.layer.v1.tar",
                &std::fs::read(&path)?,
            )?);
        }
    }
    let config = blob(
        layout,
        "application/vnd.oci.image.config.v1+json",
        config.to_string().as_bytes(),
    )?;
    let manifest_type = "application/vnd.oci.image.manifest.v1+json";
    let manifest =
        json!({"schemaVersion": 2, "mediaType": manifest_type, "config": config, "layers": layers});
    let mut manifest = blob(layout, manifest_type, manifest.to_string().as_bytes())?;
    manifest["annotations"] = json!({"org.opencontainers.image.ref.name": "probe"});
    std::fs::write(
        layout.join("index.json"),
        json!({"schemaVersion": 2, "manifests": [manifest]}).to_string(),
    )?;
    let count = layers.len();
    Ok((
        config["digest"]
            .as_str()
            .context("digest")?
            .trim_start_matches("sha256:")
            .to_owned(),
        count,
    ))
}

#[test]
fn an_image_layout_runs_and_its_cache_entry_lives_as_long_as_the_layout() -> Result<()> {
    let combo =
        combo_or_skip!("an_image_layout_runs_and_its_cache_entry_lives_as_long_as_the_layout");
    if combo.engine != EngineKind::Oci {
        println!(
            "{}: image layouts are engine = \"oci\"'s alone",
            combo.label()
        );
        return Ok(());
    }
    let dir = Folder::new(&combo.unique("layout"), (0, 0))?;
    std::fs::create_dir_all(dir.join("saved"))?;
    let layout = dir.join("layout");
    let (id, layers) = make_layout(&combo.probe_image, &dir.join("saved"), &layout)?;
    let cache = dir.join("cache");
    let config = dir.join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"oci:{}:probe\"\nengine = \"oci\"\n{}timeout = 60\n\n[commands]\nshow = [\"sh\", \"-c\", \"echo $FROM_LAYOUT $(id -u)\"]\n",
            layout.display(),
            combo.runtime_line()
        ),
    )?;
    let agentguard = |args: &[&str]| -> Result<std::process::Output> {
        let mut command = Command::new(&combo.binary);
        command.args(args).env("AGENTGUARD_OCI_CACHE", &cache);
        Ok(command.output()?)
    };
    let run = agentguard(&["run", "--config", config.to_str().context("path")?, "show"])?;
    let said = String::from_utf8_lossy(&run.stdout).into_owned();
    ensure!(
        run.status.success() && said == "yes 65534\n",
        "the run from the layout said {said:?}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let entry = cache.join("images").join(&id);
    let meta = std::fs::read_to_string(entry.join("image.json"))
        .with_context(|| format!("no cache entry {}", entry.display()))?;
    ensure!(
        meta.contains(&format!("\"source\":\"oci:{}\"", layout.display())),
        "{meta}"
    );
    let gc = agentguard(&["gc"])?;
    ensure!(
        gc.status.success() && entry.exists(),
        "gc removed the entry of a layout that is there: {}",
        String::from_utf8_lossy(&gc.stdout)
    );
    std::fs::remove_dir_all(&layout)?;
    let gc = agentguard(&["gc"])?;
    ensure!(
        gc.status.success() && !entry.exists(),
        "gc kept the entry of a layout that is gone: {}",
        String::from_utf8_lossy(&gc.stdout)
    );
    println!(
        "{}: ran from the layout ({layers} layers, the first gzip-compressed), its entry kept and then swept",
        combo.label()
    );
    Ok(())
}

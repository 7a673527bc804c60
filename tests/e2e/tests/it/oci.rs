//! `engine = "oci"` only: the image cache. The first run unpacks the image into a private
//! cache; the next run finds it there and unpacks nothing (the entry's folder is the same
//! inode, nothing is being built); no run writes it, even one that tries (every file's size,
//! mode and time are the same after runs that write everywhere they can); `gc` removes an
//! entry no store holds any more and keeps the one in use.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentguard_container::EngineKind;
use agentguard_e2e::{Folder, output, stdout_text};
use anyhow::{Context, Result, ensure};

use crate::combo_or_skip;

/// Tries to write the root (its 1777 /scratch too, which only the read-only mount stops),
/// the image's binaries and its /etc, then says what happened.
const WRITER: &str = "for f in /scratch/newfile /bin/busybox /etc/passwd /newfile /run/agentguard/relay; do (echo x >> $f) 2>&1 | head -1; done; echo done";

/// Every entry under `root`: its size, mode, owner and modification time.
fn snapshot(root: &Path) -> Result<BTreeMap<PathBuf, (u64, u32, u32, i64)>> {
    let mut seen = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.path().symlink_metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            }
            seen.insert(
                entry.path().strip_prefix(root)?.to_path_buf(),
                (meta.len(), meta.mode(), meta.uid(), meta.mtime()),
            );
        }
    }
    Ok(seen)
}

#[test]
fn the_cache_is_unpacked_once_and_never_written_by_a_run() -> Result<()> {
    let combo = combo_or_skip!("the_cache_is_unpacked_once_and_never_written_by_a_run");
    if combo.engine != EngineKind::Oci {
        println!(
            "{}: the image cache is engine = \"oci\"'s alone",
            combo.label()
        );
        return Ok(());
    }
    let dir = Folder::new(&combo.unique("cache"), (0, 0))?;
    let cache = dir.join("cache");
    let config = dir.join("agentguard.toml");
    std::fs::write(
        &config,
        format!(
            "image = \"{}\"\nengine = \"oci\"\n{}timeout = 60\n\n[commands]\nwrite = [\"sh\", \"-c\", {WRITER:?}]\n",
            combo.probe_image,
            combo.runtime_line()
        ),
    )?;
    let run = || -> Result<String> {
        let out = Command::new(&combo.binary)
            .args(["run", "--config"])
            .arg(&config)
            .arg("write")
            .env("AGENTGUARD_OCI_CACHE", &cache)
            .output()?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let first = run()?;
    let refused = first
        .lines()
        .filter(|l| l.contains("Read-only file system") || l.contains("Permission denied"))
        .count();
    ensure!(
        refused == 5
            && first
                .lines()
                .next()
                .is_some_and(|l| l.contains("Read-only file system"))
            && first.ends_with("done\n"),
        "every write refused, /scratch by the read-only root: {first}"
    );
    let id = stdout_text(&output(
        combo.store(),
        &[
            "image",
            "inspect",
            "--format",
            "{{.Id}}",
            &combo.probe_image,
        ],
    )?);
    let entry = cache
        .join("images")
        .join(id.trim().trim_start_matches("sha256:"));
    let inode = std::fs::metadata(&entry)
        .with_context(|| format!("no cache entry {}", entry.display()))?
        .ino();
    let before = snapshot(&entry.join("rootfs"))?;
    let mode = std::fs::metadata(&cache)?.mode() & 0o777;
    ensure!(mode == 0o700, "the cache folder has mode {mode:o}");
    run()?;
    run()?;
    ensure!(
        std::fs::metadata(&entry)?.ino() == inode,
        "the entry was replaced: a cache hit unpacked again"
    );
    let building: Vec<_> = std::fs::read_dir(cache.join("images"))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    ensure!(building.is_empty(), "left building: {building:?}");
    let after = snapshot(&entry.join("rootfs"))?;
    ensure!(before == after, "the cached root file system changed");
    // gc removes an entry no store holds and a build left by a gone process, keeps the rest.
    let orphan = cache.join("images").join("0".repeat(64));
    std::fs::create_dir_all(orphan.join("rootfs"))?;
    std::fs::write(orphan.join("image.json"), r#"{"env": []}"#)?;
    let half = cache
        .join("images")
        .join(format!(".building-{}-4294967294-0", "1".repeat(64)));
    std::fs::create_dir_all(&half)?;
    let gc = Command::new(&combo.binary)
        .arg("gc")
        .env("AGENTGUARD_OCI_CACHE", &cache)
        .output()?;
    let said = String::from_utf8_lossy(&gc.stdout).into_owned();
    ensure!(
        gc.status.success()
            && said.contains(&format!(
                "oci cache: removed {} (no local image store holds it)",
                "0".repeat(64)
            ))
            && !orphan.exists()
            && !half.exists()
            && entry.exists(),
        "gc said: {said}"
    );
    println!(
        "{}: one unpack, {} cached entries unchanged after three runs that write",
        combo.label(),
        after.len()
    );
    Ok(())
}

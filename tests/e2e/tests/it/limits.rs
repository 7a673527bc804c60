//! The limits and kills, seen from outside: memory, a fork bomb, an ordinary script under the
//! pids limit, an output flood, a timeout, and a read-write workspace's file ownership.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use agentguard_container::{RunResult, RunStatus, WorkspaceMode};
use agentguard_e2e::{Combo, Folder, summary};
use anyhow::{Result, ensure};

use crate::combo_or_skip;

/// Runs `argv` as the allowlisted command `name` in the probe image, with a read-only
/// workspace, a 60 s limit and a 4096-byte output cap.
async fn run(combo: &Combo, name: &str, argv: &[&str]) -> Result<RunResult> {
    let ro = Folder::new(&combo.unique(name), (65534, 65534))?;
    let executor = combo.executor(
        combo
            .builder(&combo.probe_image)
            .workspace(&ro.0)
            .command(name, argv.iter().copied())
            .timeout(Duration::from_secs(60))
            .max_output_bytes(4096)
            .build()?,
    )?;
    Ok(executor.run(&executor.invoke(name, &[])?).await?)
}

#[tokio::test]
async fn the_memory_limit_kills_a_900_mib_hog() -> Result<()> {
    let combo = combo_or_skip!("the_memory_limit_kills_a_900_mib_hog");
    let mem = run(
        &combo,
        "memhog",
        &["sh", "-c", "head -c 900m /dev/zero | tail > /dev/null"],
    )
    .await?;
    ensure!(mem.status == RunStatus::Killed, "{}", summary(&mem));
    Ok(())
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_ends_by_itself() -> Result<()> {
    let combo = combo_or_skip!("a_fork_bomb_is_contained_and_ends_by_itself");
    let bomb = run(
        &combo,
        "forkbomb",
        &[
            "sh",
            "-c",
            "n=0; while [ $n -lt 300 ]; do sleep 5 & n=$((n+1)); done; wait",
        ],
    )
    .await?;
    ensure!(
        bomb.status == RunStatus::Exited && bomb.exit_code != Some(0),
        "{}",
        summary(&bomb)
    );
    Ok(())
}

#[tokio::test]
async fn an_ordinary_script_runs_under_the_pids_limit() -> Result<()> {
    let combo = combo_or_skip!("an_ordinary_script_runs_under_the_pids_limit");
    let ordinary = run(
        &combo,
        "ordinary",
        &["sh", "-c", "i=0; while [ $i -lt 40 ]; do sh -c true; i=$((i+1)); done; for j in 1 2 3 4 5 6 7 8; do sleep 0.2 & done; wait; echo ordinary-ok"],
    )
    .await?;
    ensure!(
        ordinary.exit_code == Some(0)
            && String::from_utf8_lossy(&ordinary.stdout).contains("ordinary-ok"),
        "{}",
        summary(&ordinary)
    );
    Ok(())
}

#[tokio::test]
async fn an_output_flood_is_capped_at_4096_bytes_and_killed() -> Result<()> {
    let combo = combo_or_skip!("an_output_flood_is_capped_at_4096_bytes_and_killed");
    let flood = run(&combo, "flood", &["yes", "flood"]).await?;
    ensure!(
        flood.status == RunStatus::OutputLimit
            && flood.truncated
            && flood.stdout.len() + flood.stderr.len() == 4096,
        "{}",
        summary(&flood)
    );
    Ok(())
}

#[tokio::test]
async fn a_timeout_kills_the_container() -> Result<()> {
    let combo = combo_or_skip!("a_timeout_kills_the_container");
    let slow = combo.executor(
        combo
            .builder(&combo.probe_image)
            .command("sleepy", ["sleep", "60"])
            .timeout(Duration::from_secs(2))
            .build()?,
    )?;
    let sleepy = slow.run(&slow.invoke("sleepy", &[])?).await?;
    ensure!(
        sleepy.status == RunStatus::TimedOut && sleepy.duration < Duration::from_secs(30),
        "{}",
        summary(&sleepy)
    );
    Ok(())
}

#[tokio::test]
async fn files_written_in_a_rw_workspace_belong_to_the_configured_user() -> Result<()> {
    let combo = combo_or_skip!("files_written_in_a_rw_workspace_belong_to_the_configured_user");
    let rw = Folder::new(&combo.unique("rw"), (1234, 2345))?;
    let writer = combo.executor(
        combo
            .builder(&combo.probe_image)
            .workspace(&rw.0)
            .workspace_mode(WorkspaceMode::ReadWrite)
            .user("1234:2345")
            .command(
                "write",
                ["sh", "-c", "echo written > /workspace/out && id -u"],
            )
            .build()?,
    )?;
    let write = writer.run(&writer.invoke("write", &[])?).await?;
    let meta = std::fs::metadata(rw.join("out"));
    ensure!(
        write.exit_code == Some(0)
            && meta
                .as_ref()
                .is_ok_and(|m| m.uid() == 1234 && m.gid() == 2345),
        "{}; {:?}",
        summary(&write),
        meta.map(|m| (m.uid(), m.gid()))
    );
    Ok(())
}

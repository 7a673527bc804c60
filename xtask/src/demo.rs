//! `cargo xtask demo`: shows the isolation layers working on this machine, for real.
//!
//! It sets up the engines, classifies a few addresses with the real `agentguard` binary, then
//! runs an allowlisted command in a hardened container (and refuses one that is not).

use agentguard_container::{ContainerExecutor, ContainerSpec, Engine, EngineKind};
use anyhow::{Result, bail};

use crate::{cmd, image, setup};

pub(crate) fn run() -> Result<()> {
    let engines = setup::run()?;
    println!("\n== demo 1/3: which addresses count as public (never dials)");
    cmd::run(
        "cargo",
        &["build", "--quiet", "--package", "agentguard-cli"],
    )?;
    let agentguard = cmd::root().join("target/debug/agentguard");
    cmd::run(
        agentguard.to_str().unwrap_or("target/debug/agentguard"),
        &[
            "classify",
            "10.0.0.1",
            "8.8.8.8",
            "::ffff:127.0.0.1",
            "64:ff9b::808:808",
            "0x7f.1",
        ],
    )?;

    let (kind, runtime) = if engines.docker_runsc {
        (EngineKind::Docker, Some("runsc"))
    } else if engines.docker {
        (EngineKind::Docker, None)
    } else if engines.podman {
        (EngineKind::Podman, Some("runc"))
    } else {
        bail!("no container engine is available; run `cargo xtask setup` as root on Debian");
    };
    image::ensure_probe_image(kind.program_name())?;
    let mut builder = ContainerSpec::builder(image::PROBE_IMAGE)
        .engine(Engine::of_kind(kind))
        .command("whoami", ["sh", "-c", "echo \"user $(id -u):$(id -g), kernel $(uname -r), interfaces: $(ls /sys/class/net | tr '\\n' ' ')\"; grep CapEff /proc/self/status; touch /scratch/x"]);
    if let Some(runtime) = runtime {
        builder = builder.runtime(runtime);
    }
    let executor = ContainerExecutor::new(builder.build()?);
    let identity = executor.identity();
    println!(
        "\n== demo 2/3: the allowlisted command `whoami` in a hardened container ({kind}{})",
        runtime.map(|r| format!(" under {r}")).unwrap_or_default()
    );
    let invocation = executor
        .spec()
        .invocation("whoami", &identity)
        .map_err(|d| anyhow::anyhow!("{d}"))?;
    println!("$ {}", invocation.display());
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(executor.run_with("whoami", &identity))?;
    print!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    if String::from_utf8_lossy(&result.stderr).contains("Read-only file system") {
        println!(
            "(exit status {}: the write to the root file system was refused, as it must be)",
            result
                .exit_code
                .map_or("none".to_owned(), |c| c.to_string())
        );
    } else {
        bail!(
            "the write to the root file system was not refused (exit status {})",
            result
                .exit_code
                .map_or("none".to_owned(), |c| c.to_string())
        );
    }

    println!("\n== demo 3/3: a name that is not on the allowlist never reaches the engine");
    match executor.spec().invocation("rm -rf /", &identity) {
        Ok(_) => bail!("an unlisted name produced an argv"),
        Err(denial) => println!("{denial}"),
    }
    Ok(())
}

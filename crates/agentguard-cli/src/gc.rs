//! `agentguard gc`: remove what crashed runs left behind: containers, on every engine found,
//! and the run folders (socket and relay copy) of `network = "egress"` runs whose owner is
//! gone; with `--config` of a Kubernetes config, the stale runs' objects in its namespace.

use agentguard_container::{Engine, Error, gc};
use agentguard_sandbox::run_dir;

use crate::args::GcArgs;
use crate::{config, exit, output};

pub(crate) fn run(args: &GcArgs) -> anyhow::Result<u8> {
    if let Some(path) = &args.config {
        let config = config::load(path)?;
        let Some(cluster) = config.cluster() else {
            return Err(crate::exit::Exit::usage(format!(
                "{}: `agentguard gc --config` sweeps a cluster's namespace and needs engine = \"kubernetes\"; without --config it sweeps the local engines",
                path.display()
            ))
            .into());
        };
        output::write_lines(crate::cluster::sweep(&cluster.kubernetes, args.dry_run)?)?;
        return Ok(exit::SUCCESS);
    }
    let engines = Engine::installed();
    if engines.is_empty() {
        return Err(Error::NoEngine.into());
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut lines = crate::signal::runtime()?.block_on(async {
        let mut lines = Vec::new();
        let mut targets: Vec<(Engine, Vec<String>, String)> = engines
            .iter()
            .map(|e| (e.clone(), Vec::new(), e.kind.to_string()))
            .collect();
        // engine = "oci": each runtime that has a state folder (`oci (runc)`).
        for (engine, global) in agentguard_container::oci::swept_runtimes() {
            let label = format!("oci ({})", engine.program.display());
            targets.push((engine, global, label));
        }
        for (engine, global, label) in &targets {
            match gc::sweep(engine, global, args.dry_run).await {
                Ok(stale) if stale.is_empty() => lines.push(format!("{label}: nothing to remove")),
                Ok(stale) => {
                    lines.extend(
                        stale
                            .into_iter()
                            .map(|s| format!("{label}: {verb} {} ({})", s.name, s.why)),
                    );
                }
                Err(e) => lines.push(format!("{label}: cannot list containers: {e}")),
            }
        }
        // engine = "oci"'s image cache: entries no local store holds any more.
        match agentguard_container::oci::sweep_cache(args.dry_run).await {
            Ok(stale) => lines.extend(
                stale
                    .into_iter()
                    .map(|s| format!("oci cache: {verb} {} ({})", s.name, s.why)),
            ),
            Err(e) => lines.push(format!("oci cache: cannot sweep it: {e}")),
        }
        lines
    });
    let runs = config::runs_dir();
    match run_dir::sweep(&runs, args.dry_run) {
        Ok(stale) if stale.is_empty() => lines.push("run folders: nothing to remove".into()),
        Ok(stale) => lines.extend(
            stale
                .into_iter()
                .map(|s| format!("run folders: {verb} {} ({})", s.path.display(), s.why)),
        ),
        Err(e) => lines.push(format!("run folders: cannot read {}: {e}", runs.display())),
    }
    output::write_lines(lines)?;
    Ok(exit::SUCCESS)
}

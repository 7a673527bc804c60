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
        for engine in &engines {
            match gc::sweep(engine, &[], args.dry_run).await {
                Ok(stale) if stale.is_empty() => {
                    lines.push(format!("{}: nothing to remove", engine.kind))
                }
                Ok(stale) => {
                    lines.extend(
                        stale
                            .into_iter()
                            .map(|s| format!("{}: {verb} {} ({})", engine.kind, s.name, s.why)),
                    );
                }
                Err(e) => lines.push(format!("{}: cannot list containers: {e}", engine.kind)),
            }
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

//! `agentguard gc`: remove containers left behind by a crashed run, on every engine found.

use agentguard_container::{Engine, Error, gc};

use crate::args::GcArgs;
use crate::{exit, output};

pub(crate) fn run(args: &GcArgs) -> anyhow::Result<u8> {
    let engines = Engine::installed();
    if engines.is_empty() {
        return Err(Error::NoEngine.into());
    }
    let lines = crate::run::runtime()?.block_on(async {
        let mut lines = Vec::new();
        for engine in &engines {
            match gc::sweep(engine, &[], args.dry_run).await {
                Ok(stale) if stale.is_empty() => {
                    lines.push(format!("{}: nothing to remove", engine.kind))
                }
                Ok(stale) => {
                    let verb = if args.dry_run {
                        "would remove"
                    } else {
                        "removed"
                    };
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
    output::write_lines(lines)?;
    Ok(exit::SUCCESS)
}

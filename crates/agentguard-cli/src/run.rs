//! `agentguard run`: one allowlisted command in a hardened container, for a `network =
//! "egress"` command with its own egress proxy as the only way out.
//!
//! Streams the command's stdout and stderr (or prints one JSON object with `--json`) and
//! exits with the command's own status; agentguard's own outcomes use the documented codes of
//! `exit.rs`. SIGINT or SIGTERM stops the run's proxy, removes its folder, and kills the
//! container by name before exiting.

use agentguard_container::Streaming;
use agentguard_sandbox::{Error as SandboxError, Finished};

use crate::args::RunArgs;
use crate::config::{self, Target};
use crate::exit::{self, Exit};
use crate::output;
use crate::signal::{Shutdown, Stop};

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<u8> {
    let config = config::load(&args.config)?;
    let params = crate::args::param_words(&args.params)?;
    if let Target::Cluster(cluster) = &config.target {
        return crate::cluster::run(args, &params, &config, cluster);
    }
    let context = |e: SandboxError| {
        let context = format!("agentguard run {} ({})", args.name, e.reason());
        anyhow::Error::new(e).context(context)
    };
    if args.dry_run {
        let sandbox = config.commands.sandbox(config.spec, None, Streaming::Off)?;
        let invocation = sandbox.invoke(&args.name, &params).map_err(context)?;
        let command = sandbox
            .engine_command(&invocation, &sandbox.identity())
            .map_err(context)?;
        output::write_lines([command.display()])?;
        return Ok(exit::SUCCESS);
    }
    let audit = crate::config::runs_log(config.audit.as_ref())?;
    let sandbox = config
        .commands
        .sandbox(config.spec, audit, streaming(args))?;
    // Checked once, before anything starts; a refusal is recorded and exits 2.
    let invocation = sandbox.invoke(&args.name, &params).map_err(context)?;
    let identity = sandbox.identity();
    let outcome = crate::signal::runtime()?.block_on(async {
        let mut shutdown = Shutdown::install()?;
        let stop = tokio::select! {
            result = sandbox.run_with(&invocation, &identity) => return anyhow::Ok(Ok(result)),
            stop = shutdown.recv() => stop,
        };
        // The run's future is dropped: its proxy is stopped and its folder removed.
        sandbox.kill_by_name(&identity.name).await;
        sandbox.executor().record_stopped(
            &args.name,
            &identity.name,
            "interrupted",
            Some(stop.name()),
        )?;
        anyhow::Ok(Err(stop))
    })?;
    match outcome {
        Err(stop) => {
            let code = match stop {
                Stop::Interrupt => exit::INTERRUPTED,
                Stop::Terminate => exit::TERMINATED,
            };
            Err(Exit::new(
                code,
                format!(
                    "{}: killed and removed container {}",
                    stop.name(),
                    identity.name
                ),
            )
            .into())
        }
        Ok(Ok(finished)) => finished_report(&finished, invocation.params(), args.json),
        Ok(Err(SandboxError::Failed(finished))) => {
            finished_report(&finished, invocation.params(), args.json)
        }
        Ok(Err(other)) => Err(context(other)),
    }
}

/// How `run` copies the output: not at all with `--json`, byte for byte with `--raw`,
/// otherwise neutralized on a terminal.
fn streaming(args: &RunArgs) -> Streaming {
    match (args.json, args.raw) {
        (true, _) => Streaming::Off,
        (false, true) => Streaming::Raw,
        (false, false) => Streaming::Safe,
    }
}

fn finished_report(
    finished: &Finished,
    params: &[(String, agentguard_policy::Value)],
    json: bool,
) -> anyhow::Result<u8> {
    // A `network = "none"` run has no proxy: nothing allowed, nothing refused.
    let egress = finished.egress.clone().unwrap_or_default();
    let code = crate::ended::report(
        &finished.result,
        params,
        egress.to_json(),
        json,
        "container",
    );
    if !json && let Some(line) = egress.refused_line() {
        crate::output::note(&line);
    }
    code
}

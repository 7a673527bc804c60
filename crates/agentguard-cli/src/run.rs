//! `agentguard run`: one allowlisted command in a hardened container, for a `network =
//! "egress"` command with its own egress proxy as the only way out.
//!
//! Streams the command's stdout and stderr (or prints one JSON object with `--json`) and
//! exits with the command's own status; agentguard's own outcomes use the documented codes of
//! `exit.rs`. SIGINT or SIGTERM stops the run's proxy, removes its folder, and kills the
//! container by name before exiting.

use agentguard_container::Streaming;
use agentguard_sandbox::{Error as SandboxError, Finished, RunOptions};

use crate::args::RunArgs;
use crate::config::{self, Target};
use crate::exit::{self, Exit};
use crate::output;
use crate::signal::{Shutdown, Stop};

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<u8> {
    let config = config::load(&args.config)?;
    let params = crate::args::param_words(&args.params)?;
    if let Target::Cluster(cluster) = &config.target {
        if args.observe {
            return Err(Exit::new(
                exit::USAGE,
                "--observe is for the container engines (docker, podman); a Kubernetes run's proxy is shared and is never put in observe mode",
            )
            .into());
        }
        return crate::cluster::run(args, &params, &config, cluster);
    }
    let context = |e: SandboxError| {
        let context = crate::ended::refusal_context(&args.name, e.reason(), &e.to_string());
        anyhow::Error::new(e).context(context)
    };
    if args.dry_run {
        let sandbox = config.commands.sandbox(config.spec, None, Streaming::Off)?;
        let invocation = sandbox.invoke(&args.name, &params).map_err(context)?;
        let lines = sandbox
            .engine_command(&invocation, &sandbox.identity())
            .map_err(context)?;
        output::write_lines(lines)?;
        return Ok(exit::SUCCESS);
    }
    let audit = crate::config::runs_log(config.audit.as_ref())?;
    let sandbox = config
        .commands
        .sandbox(config.spec, audit, streaming(args))?;
    // Checked once, before anything starts; a refusal is recorded and exits 2.
    let invocation = sandbox.invoke(&args.name, &params).map_err(context)?;
    let identity = sandbox.identity();
    let options = RunOptions {
        observe: args.observe,
        ..RunOptions::default()
    };
    if args.observe {
        sandbox.check_observe(&args.name).map_err(context)?;
        crate::output::note(OBSERVE_START);
    }
    let outcome = crate::signal::runtime()?.block_on(async {
        let mut shutdown = Shutdown::install()?;
        let stop = tokio::select! {
            result = sandbox.run(&invocation, &identity, options) => return anyhow::Ok(Ok(result)),
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
        Ok(Ok(finished)) => finished_report(&finished, args),
        Ok(Err(SandboxError::Failed(finished))) => finished_report(&finished, args),
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

/// Printed on stderr before an observe run starts.
const OBSERVE_START: &str = "agentguard: observe: THE POLICY IS NOT ENFORCED for public hosts in this run: what it would refuse is let through and recorded as observed (private addresses, container flags and route secrets stay enforced); run only a command you trust";

/// The line an observe run ends with: how many targets the policy would have refused.
fn observe_end(egress: &agentguard_sandbox::EgressCounts) -> String {
    let targets: Vec<String> = egress
        .observed_targets
        .iter()
        .map(|t| format!("{} x{}", t.target, t.count))
        .collect();
    let list = if targets.is_empty() {
        String::new()
    } else {
        format!(": {}", targets.join(", "))
    };
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "agentguard: observe: the policy was not enforced for public hosts; {} would have been refused ({}){list}; `agentguard policy suggest LOG --config FILE` turns the log into config lines",
        plural(egress.observed_targets.len() as u64, "target", "targets"),
        plural(egress.observed, "request", "requests"),
    )
}

fn finished_report(finished: &Finished, args: &RunArgs) -> anyhow::Result<u8> {
    // A `network = "none"` run has no proxy: nothing allowed, nothing refused.
    let egress = finished.egress.clone().unwrap_or_default();
    let code = crate::ended::report(finished, None, args.json, "container");
    if !args.json
        && let Some(line) = egress.refused_line()
    {
        crate::output::note(&line);
    }
    if args.observe {
        crate::output::note(&observe_end(&egress));
    }
    code
}

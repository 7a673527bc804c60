//! `agentguard run`, `gc` and `doctor`: the container layer on the command line.
//!
//! `run` streams the command's stdout and stderr (or prints one JSON object with `--json`)
//! and exits with the command's own status; agentguard's own outcomes use the documented
//! codes of `exit.rs`. Ctrl-C or SIGTERM kills the container by name before exiting.

use std::sync::Arc;

use agentguard_audit::{AuditLog, AuditSink, Decision, Durability, Event, LogOptions};
use agentguard_container::doctor::{self, Level};
use agentguard_container::{
    ContainerExecutor, Engine, RunError, RunResult, RunStatus, gc as sweep,
};
use anyhow::Context;
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

use crate::args::{GcArgs, RunArgs};
use crate::{Exit, config, exit, output};

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<u8> {
    let config = config::load(&args.config).map_err(|e| Exit::usage(format!("{e:#}")))?;
    if args.dry_run {
        let executor = ContainerExecutor::new(config.spec);
        let invocation = executor
            .spec()
            .invocation(&args.name, &executor.identity())
            .map_err(|d| Exit::new(exit::DENIED, d.to_string()))?;
        output::write_lines([invocation.display()])?;
        return Ok(exit::SUCCESS);
    }
    let image = config.spec.image().to_owned();
    let audit: Option<Arc<dyn AuditSink>> = match &config.audit {
        // A run is rare and worth a sync: fsync durability (docs/audit.md).
        Some(path) => Some(Arc::new(AuditLog::open(
            path,
            LogOptions::with_durability(Durability::Fsync),
        )?)),
        None => None,
    };
    let mut executor = ContainerExecutor::new(config.spec).with_streaming(!args.json);
    if let Some(sink) = &audit {
        executor = executor.with_audit(Arc::clone(sink));
    }
    let identity = executor.identity();
    let outcome = runtime()?.block_on(async {
        let mut terminate =
            signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let interrupted = tokio::select! {
            result = executor.run_with(&args.name, &identity) => return anyhow::Ok(Ok(result)),
            _ = tokio::signal::ctrl_c() => (exit::INTERRUPTED, "SIGINT"),
            _ = terminate.recv() => (exit::TERMINATED, "SIGTERM"),
        };
        executor.kill_by_name(&identity.name).await;
        if let Some(sink) = &audit {
            sink.record(
                Event::container_run(Decision::Error, "interrupted", &args.name, &image)
                    .data("signal", interrupted.1)
                    .data("container", identity.name.as_str()),
            )?;
        }
        anyhow::Ok(Err(interrupted))
    })?;
    match outcome {
        Err((code, signal)) => Err(Exit::new(
            code,
            format!("{signal}: killed and removed container {}", identity.name),
        )
        .into()),
        Ok(Ok(result)) => report(&result, args.json),
        Ok(Err(RunError::Failed(result))) => report(&result, args.json),
        Ok(Err(RunError::Denied(denial))) => {
            Err(Exit::new(exit::DENIED, denial.to_string()).into())
        }
        Ok(Err(other)) => {
            Err(Exit::new(exit::ERROR, format!("{other} [{}]", other.reason())).into())
        }
    }
}

fn report(result: &RunResult, json: bool) -> anyhow::Result<u8> {
    if json {
        let value = json!({
            "command": result.command,
            "status": result.status.as_str(),
            "exit_code": result.exit_code,
            "stdout": String::from_utf8_lossy(&result.stdout),
            "stderr": String::from_utf8_lossy(&result.stderr),
            "truncated": result.truncated,
            "duration_ms": result.duration.as_millis() as u64,
            "container": result.container,
        });
        output::write_lines([value.to_string()])?;
    }
    let code = match result.status {
        RunStatus::Exited => {
            u8::try_from(result.exit_code.unwrap_or(i32::from(exit::ERROR))).unwrap_or(exit::ERROR)
        }
        RunStatus::TimedOut => {
            eprintln!(
                "agentguard: {} timed out; container {} killed and removed",
                result.command, result.container
            );
            exit::TIMEOUT
        }
        RunStatus::OutputLimit => {
            eprintln!(
                "agentguard: {} exceeded the output limit; output truncated, container {} killed and removed",
                result.command, result.container
            );
            exit::OUTPUT_LIMIT
        }
        RunStatus::Killed => {
            eprintln!(
                "agentguard: {} was killed by SIGKILL, not by agentguard: probable OOM (memory limit)",
                result.command
            );
            137
        }
    };
    Ok(code)
}

pub(crate) fn gc(args: &GcArgs) -> anyhow::Result<u8> {
    let engines = Engine::installed();
    if engines.is_empty() {
        return Err(Exit::new(
            exit::ERROR,
            "no container engine found on PATH: install docker or podman",
        )
        .into());
    }
    let results = runtime()?.block_on(async {
        let mut lines = Vec::new();
        for engine in &engines {
            match sweep::sweep(engine, args.dry_run).await {
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
    output::write_lines(results)?;
    Ok(exit::SUCCESS)
}

pub(crate) fn doctor() -> anyhow::Result<u8> {
    let runtime = runtime()?;
    let mut findings = runtime.block_on(doctor::diagnose());
    // The trivial hardened run uses the image of the config in use, when there is one.
    let path = std::env::var_os("AGENTGUARD_CONFIG").map_or_else(
        || std::path::PathBuf::from("agentguard.toml"),
        std::path::PathBuf::from,
    );
    if path.exists() {
        match config::load(&path) {
            Ok(config) => findings.push(runtime.block_on(doctor::trial_run(&config.spec))),
            Err(e) => findings.push(doctor::Finding {
                level: Level::Fail,
                what: format!("{}: {e:#}", path.display()),
                fix: "fix the config file".into(),
            }),
        }
    } else {
        findings.push(doctor::Finding {
            level: Level::Warn,
            what: format!("no config file at {} (or in AGENTGUARD_CONFIG): the trivial hardened run of its image was skipped", path.display()),
            fix: "run `agentguard doctor` where agentguard.toml is, or set AGENTGUARD_CONFIG".into(),
        });
    }
    let failed = findings.iter().any(|f| f.level == Level::Fail);
    output::write_lines(findings.into_iter().map(|f| {
        let tag = match f.level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        if f.fix.is_empty() {
            format!("{tag} {}", f.what)
        } else {
            format!("{tag} {}\n     fix: {}", f.what, f.fix)
        }
    }))?;
    Ok(if failed { exit::FAILURE } else { exit::SUCCESS })
}

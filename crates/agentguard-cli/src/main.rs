//! The `agentguard` binary: parses the command line, installs logging, dispatches, and maps
//! every error to a documented exit code in one place (`exit::code_for`).

mod args;
mod args_egress;
mod args_learn;
mod audit;
mod audit_show;
mod checkup;
mod classify;
mod cluster;
mod cluster_mcp;
use agentguard_config as config;
mod doctor;
mod egress;
mod egress_policy;
mod ended;
mod exit;
mod fetch;
mod gc;
mod init;
mod k8s;
mod learn;
mod logging;
mod mcp;
mod metrics;
mod net_args;
mod output;
mod plan;
mod policy_check;
mod run;
mod signal;
mod suggest;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A proxy whose audit goes to stdout keeps its diagnostics in the same stream.
    let stream = match &cli.command {
        Command::EgressProxy(args) if args.audit_stdout => args.run.clone(),
        _ => None,
    };
    logging::init(cli.verbose, stream);
    match dispatch(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if output::is_broken_pipe(&err) {
                return ExitCode::from(exit::SUCCESS);
            }
            // A message of several lines (a parse error's file, line and text) prints as
            // lines, each escaped on its own, never as one line of `\u{a}`.
            let text = format!("{err:#}");
            let mut lines = text.lines();
            let first = lines.next().unwrap_or_default();
            crate::output::note(&format!("agentguard: error: {first}"));
            for line in lines {
                crate::output::note(&format!("  {line}"));
            }
            ExitCode::from(exit::code_for(&err))
        }
    }
}

fn dispatch(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Classify(args) => classify::run(&args),
        Command::Audit(command) => audit::run(command),
        Command::Fetch(args) => fetch::run(&args),
        Command::EgressProxy(args) => egress::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Gc(args) => gc::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Mcp(args) => mcp::run(&args),
        Command::Tools(args) => mcp::tools(&args),
        Command::K8s(command) => k8s::run(&command),
        Command::Policy(args::PolicyCommand::Suggest(args)) => suggest::run(&args),
        Command::Policy(args::PolicyCommand::Check(args)) => policy_check::run(&args),
        Command::Init(args) => init::run(&args),
        Command::Config(args::ConfigCommand::Schema) => {
            let schema = serde_json::to_string_pretty(&config::schema())?;
            output::write_lines([schema])?;
            Ok(exit::SUCCESS)
        }
        Command::Manpage => {
            let mut page = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(&mut page)?;
            std::io::Write::write_all(&mut std::io::stdout(), &page)?;
            Ok(exit::SUCCESS)
        }
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "agentguard", &mut std::io::stdout());
            Ok(exit::SUCCESS)
        }
    }
}

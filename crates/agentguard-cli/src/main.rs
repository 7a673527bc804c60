//! The `agentguard` binary: parses the command line, installs logging, dispatches, and maps
//! every error to a documented exit code in one place.

mod args;
mod audit;
mod classify;
mod config;
mod containers;
mod egress;
mod exit;
mod fetch;
mod logging;
mod output;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

/// An error whose exit code is not the default [`exit::ERROR`].
#[derive(Debug)]
pub(crate) struct Exit {
    code: u8,
    message: String,
}

impl Exit {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Exit {
        Exit {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn failure(message: impl Into<String>) -> Exit {
        Exit {
            code: exit::FAILURE,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Exit {
        Exit {
            code: exit::USAGE,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.verbose);
    match dispatch(cli.command) {
        Ok(code) => exit::code(code),
        Err(err) => {
            if output::is_broken_pipe(&err) {
                return exit::code(exit::SUCCESS);
            }
            eprintln!("agentguard: error: {err:#}");
            match err.downcast_ref::<Exit>() {
                Some(e) => exit::code(e.code),
                None => exit::code(exit::ERROR),
            }
        }
    }
}

fn dispatch(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Classify(args) => classify::run(&args),
        Command::Audit(command) => audit::run(command),
        Command::Fetch(args) => fetch::run(&args),
        Command::EgressProxy(args) => egress::run(&args),
        Command::Run(args) => containers::run(&args),
        Command::Gc(args) => containers::gc(&args),
        Command::Doctor => containers::doctor(),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "agentguard", &mut std::io::stdout());
            Ok(exit::SUCCESS)
        }
    }
}

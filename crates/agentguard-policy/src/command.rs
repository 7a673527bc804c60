//! The command allowlist: the only way a NAME becomes an argv.
//!
//! An agent picks a command by name; the argv comes from this fixed map and nowhere else, with
//! at most the typed values of the params the operator declared (`template.rs`).
//! Lookup is by exact name: no trimming, no case folding, no prefix matching, so `Run_Tests`,
//! `run_tests ` and `run` never select `run_tests`. Names and argv are validated when the map
//! is built, so a bad configuration fails at start-up, not at the first call.

use std::collections::BTreeMap;

use crate::decision::{Denial, Reason};
use crate::error::{Error, Result};
use crate::param::ParamSpec;
use crate::template::{Command, Invocation};
use crate::value::Arg;

/// Longest accepted command name.
pub const MAX_COMMAND_NAME_LEN: usize = 64;

/// A validated map from command NAME to its argv template and params.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommandAllowlist {
    commands: BTreeMap<String, Command>,
}

impl CommandAllowlist {
    /// An empty allowlist (every lookup is denied).
    pub fn new() -> CommandAllowlist {
        CommandAllowlist::default()
    }

    /// Adds one command without params after validating its name and argv. A repeated name
    /// is an error.
    pub fn insert<I, S>(&mut self, name: &str, argv: I) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let argv: Vec<String> = argv.into_iter().map(Into::into).collect();
        self.insert_with_params(name, argv, &BTreeMap::new())
    }

    /// Adds one command with its params (`[commands.NAME.params.P]`), after validating its
    /// name, its argv template and every param. A repeated name is an error.
    pub fn insert_with_params(
        &mut self,
        name: &str,
        argv: Vec<String>,
        params: &BTreeMap<String, ParamSpec>,
    ) -> Result<()> {
        let refuse = |reason: String| Error::Command {
            name: name.to_owned(),
            reason,
        };
        validate_name(name).map_err(refuse)?;
        validate_argv(&argv).map_err(refuse)?;
        if self.commands.contains_key(name) {
            return Err(refuse("the name is defined twice".into()));
        }
        let command = Command::from_template(name, argv, params).map_err(refuse)?;
        self.commands.insert(name.to_owned(), command);
        Ok(())
    }

    /// Builds an allowlist from `(name, argv)` pairs.
    pub fn from_pairs<N, I, S>(pairs: impl IntoIterator<Item = (N, I)>) -> Result<CommandAllowlist>
    where
        N: AsRef<str>,
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut list = CommandAllowlist::new();
        for (name, argv) in pairs {
            list.insert(name.as_ref(), argv)?;
        }
        Ok(list)
    }

    /// The command of exactly this name, or a `command_not_allowed` denial.
    pub fn get(&self, name: &str) -> std::result::Result<&Command, Denial> {
        self.commands.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.names().collect();
            Denial::new(
                Reason::CommandNotAllowed,
                format!(
                    "command {name:?} is not on the allowlist; allowed names: {}",
                    if known.is_empty() {
                        "(none)".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }

    /// The command `name` with `args` checked and placed: a `command_not_allowed` denial for
    /// a name off the allowlist, `invalid_arguments` for a value its param refuses.
    pub fn invoke(
        &self,
        name: &str,
        args: &[(String, Arg)],
    ) -> std::result::Result<Invocation, Denial> {
        Ok(self.get(name)?.invoke(args)?)
    }

    /// The commands, sorted by name.
    pub fn commands(&self) -> impl Iterator<Item = &Command> {
        self.commands.values()
    }

    /// The allowed names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.commands.keys().map(String::as_str)
    }

    /// Number of commands.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// True when no command is allowed.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

fn validate_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.len() > MAX_COMMAND_NAME_LEN {
        return Err(format!(
            "the name is longer than {MAX_COMMAND_NAME_LEN} characters"
        ));
    }
    let first = name.as_bytes()[0];
    if !first.is_ascii_alphanumeric() {
        return Err("a name starts with a letter or digit".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "character {c:?} is not allowed; use letters, digits, `_`, `-` and `.`"
        ));
    }
    Ok(())
}

fn validate_argv(argv: &[String]) -> std::result::Result<(), String> {
    let Some(program) = argv.first() else {
        return Err(
            "the argv is empty; give at least the program, e.g. [\"python3\", \"-m\", \"pytest\"]"
                .into(),
        );
    };
    if program.is_empty() {
        return Err("argv[0] (the program) is empty".into());
    }
    if program.starts_with('-') {
        return Err(format!(
            "argv[0] {program:?} starts with `-` and would be read as an option; name the program first"
        ));
    }
    if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
        return Err(format!("argv[{i}] contains a NUL byte"));
    }
    Ok(())
}

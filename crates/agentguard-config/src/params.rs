//! `[commands.NAME.params.P]`: a command's typed params as the config file writes them. The
//! keys are read here and checked by the policy crate (the one validator every front end
//! uses), whose errors name the param and the key.

use agentguard_policy::{Arg, ParamSpec};
use serde::Deserialize;

use crate::error::KeyError;

/// One param table; which keys a type takes is the policy crate's rule.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ParamTable {
    #[serde(rename = "type")]
    kind: String,
    description: Option<String>,
    default: Option<Default>,
    values: Option<Vec<String>>,
    min: Option<i64>,
    max: Option<i64>,
    under: Option<String>,
    #[serde(rename = "kind")]
    path_kind: Option<String>,
    must_exist: Option<bool>,
    glob: Option<String>,
    pattern: Option<String>,
    max_length: Option<usize>,
}

/// A default: a string, or an integer for an `integer` param.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum Default {
    Integer(i64),
    Text(String),
}

impl ParamTable {
    pub(crate) fn into_spec(self) -> ParamSpec {
        ParamSpec {
            kind: self.kind,
            description: self.description,
            default: self.default.map(|d| match d {
                Default::Integer(n) => Arg::Integer(i128::from(n)),
                Default::Text(text) => Arg::Text(text),
            }),
            values: self.values,
            min: self.min,
            max: self.max,
            under: self.under,
            path_kind: self.path_kind,
            must_exist: self.must_exist,
            glob: self.glob,
            pattern: self.pattern,
            max_length: self.max_length,
        }
    }
}

/// What a `path` param needs of its target: a workspace (a folder here, or a claim on a
/// cluster); and on a cluster, whose workspace is not on this host, no host check
/// (`must_exist`, `kind`), which could only be made here.
pub(crate) fn check_paths(
    spec: &agentguard_container::ContainerSpec,
    has_workspace: bool,
    on_cluster: bool,
) -> Result<(), KeyError> {
    for command in spec.commands().commands() {
        for (name, param) in command.params() {
            let agentguard_policy::ParamType::Path(rule) = &param.ty else {
                continue;
            };
            let key = format!("commands.{}.params.{name}", command.name());
            if !has_workspace {
                return Err(KeyError::new(
                    key,
                    "a path param names a file of the workspace, and no workspace is mounted; set `workspace` (or [kubernetes] workspace_claim)",
                ));
            }
            if on_cluster && rule.host_checked() {
                return Err(KeyError::new(
                    key,
                    "must_exist and kind are checked on this host, and a cluster's workspace is not here; remove them (the command itself sees a missing file)",
                ));
            }
        }
    }
    Ok(())
}

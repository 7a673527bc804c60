//! `[commands.NAME.params.P]`: a command's typed params as the config file writes them. The
//! keys are read here and checked by the policy crate (the one validator every front end
//! uses), whose errors name the param and the key.

use agentguard_policy::{Arg, ParamSpec};
use serde::Deserialize;

/// One param table; which keys a type takes is the policy crate's rule.
#[derive(Debug, Deserialize)]
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
    pattern: Option<String>,
    max_length: Option<usize>,
}

/// A default: a string, or an integer for an `integer` param.
#[derive(Debug, Deserialize)]
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
            pattern: self.pattern,
            max_length: self.max_length,
        }
    }
}

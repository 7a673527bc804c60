//! `[commands]` in both forms: `NAME = [argv]`, or `[commands.NAME]` with `argv`,
//! `description`, `params`, the network keys `egress.rs` reads (`network`, `egress_allow`,
//! `routes`), and the values a command sets for itself over the top level's
//! (`workspace_mode`, `timeout`, `max_output_bytes`, `memory`, `cpus`, `pids`, `tmpfs_size`,
//! `[commands.NAME.environment]`, `writable`, `hidden`), parsed and bounded exactly as the top
//! level's, with errors naming `commands.NAME.KEY`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use agentguard_container::{CommandSettings, Cpus, WorkspaceMode};
use agentguard_policy::ParamSpec;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::Text;

/// One `[commands]` entry: the short form (an argv) or the table form.
#[derive(Debug)]
pub enum CommandEntry {
    /// `NAME = ["argv", ...]`.
    Argv(Vec<String>),
    /// `[commands.NAME]` with `argv` and the optional keys.
    Table(Box<CommandTable>),
}

impl schemars::JsonSchema for CommandEntry {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CommandEntry".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let table = generator.subschema_for::<CommandTable>();
        schemars::json_schema!({
            "description": "A command: its argv (`NAME = [\"prog\", \"arg\"]`), or a table with `argv` and its own keys.",
            "oneOf": [
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
                table
            ]
        })
    }
}

/// `[commands.NAME]`: the argv, what agents are told, the network keys (`egress.rs`), the
/// params, and the values the command sets for itself over the top level's.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandTable {
    argv: Vec<String>,
    pub(crate) description: Option<String>,
    pub(crate) network: Option<String>,
    pub(crate) egress_allow: Option<Vec<String>>,
    pub(crate) routes: Option<Vec<String>>,
    #[serde(default)]
    params: BTreeMap<String, super::params::ParamTable>,
    workspace_mode: Option<String>,
    timeout: Option<u64>,
    max_output_bytes: Option<usize>,
    memory: Option<Text>,
    cpus: Option<Text>,
    pids: Option<u32>,
    tmpfs_size: Option<Text>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    writable: Vec<String>,
    #[serde(default)]
    hidden: Vec<String>,
}

impl CommandEntry {
    /// The values the command sets for itself, parsed as the top level's are (errors name
    /// `commands.NAME.KEY`); `None` for the short form or a table that sets none.
    pub fn settings(
        &self,
        name: &str,
    ) -> Result<Option<CommandSettings>, agentguard_container::Error> {
        let CommandEntry::Table(t) = self else {
            return Ok(None);
        };
        let own = |e: agentguard_container::Error| e.in_command(name);
        let text = |t: &Option<Text>| t.as_ref().map(Text::to_text);
        let settings = CommandSettings {
            workspace_mode: t
                .workspace_mode
                .as_deref()
                .map(WorkspaceMode::parse)
                .transpose()
                .map_err(own)?,
            timeout: t.timeout.map(Duration::from_secs),
            max_output_bytes: t.max_output_bytes,
            memory: text(&t.memory)
                .as_deref()
                .map(CommandSettings::parse_memory)
                .transpose()
                .map_err(own)?,
            cpus: text(&t.cpus)
                .as_deref()
                .map(Cpus::parse)
                .transpose()
                .map_err(own)?,
            pids: t.pids,
            tmpfs_size: text(&t.tmpfs_size)
                .as_deref()
                .map(CommandSettings::parse_tmpfs_size)
                .transpose()
                .map_err(own)?,
            environment: t.environment.clone(),
            writable: t.writable.clone(),
            hidden: t.hidden.clone(),
        };
        Ok((settings != CommandSettings::default()).then_some(settings))
    }

    /// The argv template and the params as the policy crate takes them.
    pub fn into_parts(self) -> (Vec<String>, BTreeMap<String, ParamSpec>) {
        match self {
            CommandEntry::Argv(argv) => (argv, BTreeMap::new()),
            CommandEntry::Table(table) => {
                let params = table
                    .params
                    .into_iter()
                    .map(|(name, param)| (name, param.into_spec()))
                    .collect();
                (table.argv, params)
            }
        }
    }
}

// By hand rather than `untagged`, so that a mistake inside a table keeps toml's message with
// the key and its line.
impl<'de> Deserialize<'de> for CommandEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = CommandEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an argv array (NAME = [\"python3\", \"-m\", \"pytest\"]) or a [commands.NAME] table with `argv`")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<CommandEntry, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(seq)).map(CommandEntry::Argv)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<CommandEntry, A::Error> {
                CommandTable::deserialize(MapAccessDeserializer::new(map))
                    .map(|t| CommandEntry::Table(Box::new(t)))
            }
        }
        deserializer.deserialize_any(Entry)
    }
}

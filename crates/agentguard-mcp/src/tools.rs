//! The tool definitions, one source for `tools/list` and `agentguard tools`: one tool per
//! allowlisted command, with an input schema that accepts nothing, and `fetch` (a URL) when a
//! fetch allowlist is configured. Descriptions are generated from what is enforced (argv,
//! network, workspace, timeout, output cap), after the operator's own sanitized text; the
//! list is sorted and never changes while a server runs.

use std::collections::BTreeMap;

use agentguard_container::WorkspaceMode;
use agentguard_sandbox::{Network, Sandbox};
use serde_json::{Value, json};

use crate::error::Error;
use crate::present::sanitize;

/// The name of the fetch tool.
pub const FETCH_TOOL: &str = "fetch";
/// The longest operator description kept (characters).
pub const MAX_DESCRIPTION: usize = 1024;

/// What the fetch tool enforces, for its description.
#[derive(Debug, Clone)]
pub struct FetchTool {
    /// The allowed host patterns.
    pub hosts: Vec<String>,
    /// The body cap in bytes.
    pub max_bytes: u64,
}

/// The formats `agentguard tools --format` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"tools": [...]}` as in `tools/list`.
    Mcp,
    /// OpenAI function definitions with strict schemas.
    Openai,
    /// Anthropic tool definitions (`input_schema`).
    Anthropic,
}

/// The tools of one configuration, sorted by name.
#[derive(Debug, Clone)]
pub struct ToolSet {
    tools: Vec<Value>,
}

/// Checks a tool name: `^[a-z][a-z0-9_]{0,47}$` (fits MCP, OpenAI's 64-character function
/// names and the prefixes hosts add).
pub fn validate_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 48;
    if ok {
        Ok(())
    } else {
        Err(Error::ToolName {
            name: sanitize(name),
            why: "a tool name is a lower-case letter, then up to 47 lower-case letters, digits or `_`".into(),
        })
    }
}

/// The input schema of a command tool: an object with no properties, nothing else allowed.
fn no_input() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

impl ToolSet {
    /// The tools for `sandbox`'s commands (with the operator's `descriptions`) and, when
    /// given, the fetch tool. Every name is checked.
    pub fn new(
        sandbox: &Sandbox,
        descriptions: &BTreeMap<String, String>,
        fetch: Option<&FetchTool>,
    ) -> Result<ToolSet, Error> {
        let mut tools = Vec::new();
        for name in sandbox.executor().spec().commands().names() {
            validate_name(name)?;
            if fetch.is_some() && name == FETCH_TOOL {
                return Err(Error::ToolName {
                    name: name.to_owned(),
                    why: "`fetch` is the fetch tool's name while a [fetch] table is configured; rename the command".into(),
                });
            }
            tools.push(command_tool(sandbox, name, descriptions.get(name)));
        }
        if let Some(fetch) = fetch {
            tools.push(fetch_tool(fetch));
        }
        tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Ok(ToolSet { tools })
    }

    /// The definitions as `tools/list` lists them.
    pub fn definitions(&self) -> &[Value] {
        &self.tools
    }

    /// True when `name` is one of the tools.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t["name"] == name)
    }

    /// The definitions in `format`.
    pub fn export(&self, format: Format) -> Value {
        match format {
            Format::Mcp => json!({"tools": self.tools}),
            Format::Openai => self
                .tools
                .iter()
                .map(|t| {
                    // Strict mode: every object closed and every property required.
                    let mut parameters = t["inputSchema"].clone();
                    let required: Vec<Value> = parameters["properties"]
                        .as_object()
                        .map(|p| p.keys().map(|k| Value::from(k.as_str())).collect())
                        .unwrap_or_default();
                    parameters["required"] = Value::from(required);
                    json!({"type": "function", "name": t["name"], "description": t["description"], "parameters": parameters, "strict": true})
                })
                .collect(),
            Format::Anthropic => self
                .tools
                .iter()
                .map(|t| json!({"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}))
                .collect(),
        }
    }
}

/// One command's tool: what it runs and under which limits, from the enforced spec.
fn command_tool(sandbox: &Sandbox, name: &str, description: Option<&String>) -> Value {
    let spec = sandbox.executor().spec();
    let argv = spec
        .commands()
        .get(name)
        .map(|argv| sanitize(&argv.join(" ")))
        .unwrap_or_default();
    let network = sandbox.network_of(name).unwrap_or(Network::None);
    let network_text = match (network, sandbox.egress_hosts(name)) {
        (Network::Egress, Some(hosts)) => format!(
            "network only through its own egress proxy, to {}",
            sanitize(&hosts.join(", "))
        ),
        _ => "no network".to_owned(),
    };
    let mode = spec.workspace().map(|(_, mode)| mode);
    let workspace = match mode {
        Some(WorkspaceMode::ReadOnly) => "the workspace mounted read-only at /workspace",
        Some(WorkspaceMode::ReadWrite) => "the workspace mounted read-write at /workspace",
        None => "no workspace",
    };
    let facts = format!(
        "Runs the allowlisted command {name} ({argv}) in a hardened container: {network_text}, {workspace}, {} s timeout, output capped at {} bytes. Takes no arguments; the command line is fixed by the operator's allowlist.",
        spec.timeout().as_secs(),
        spec.max_output_bytes()
    );
    let description = match description {
        Some(text) => {
            let own: String = sanitize(text).chars().take(MAX_DESCRIPTION).collect();
            format!("{} {facts}", own.trim())
        }
        None => facts,
    };
    let writes = mode == Some(WorkspaceMode::ReadWrite);
    json!({
        "name": name,
        "title": format!("{name} (AgentGuard)"),
        "description": description,
        "inputSchema": no_input(),
        "annotations": {
            "readOnlyHint": !writes,
            "destructiveHint": writes,
            "openWorldHint": network == Network::Egress,
        },
    })
}

fn fetch_tool(fetch: &FetchTool) -> Value {
    json!({
        "name": FETCH_TOOL,
        "title": "fetch (AgentGuard)",
        "description": format!(
            "HTTP GET of an https URL on the allowlist ({}). Public addresses only, checked after one DNS resolution; redirects are not followed; the body is capped at {} bytes. Returns the HTTP status and the body.",
            sanitize(&fetch.hosts.join(", ")),
            fetch.max_bytes
        ),
        "inputSchema": {
            "type": "object",
            "properties": {"url": {"type": "string", "description": "An absolute https URL on an allowed host."}},
            "required": ["url"],
            "additionalProperties": false,
        },
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "openWorldHint": true},
    })
}

#[cfg(test)]
mod tests {
    use super::validate_name;

    #[test]
    fn tool_names_are_checked() {
        for good in ["run_tests", "a", "install2", &"x".repeat(48)] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Run",
            "2run",
            "run-tests",
            "run tests",
            "rün",
            &"x".repeat(49),
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}

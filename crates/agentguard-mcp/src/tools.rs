//! The tool definitions, one source for `tools/list` and `agentguard tools`: one tool per
//! allowlisted command, with an input schema generated from its params (nothing, for a
//! command without params), and `fetch` (a URL) when a fetch allowlist is configured. Descriptions are generated from what is enforced (argv,
//! network, workspace, timeout, output cap), after the operator's own sanitized text; the
//! list is sorted and its tools never change while a server runs, but a `path` param with a
//! `glob` lists the workspace paths it matches at each `tools/list`.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentguard_container::{ContainerSpec, WorkspaceMode};
use agentguard_policy::Command;
use agentguard_sandbox::{Network, Sandbox};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::error::Error;
use crate::present::sanitize;
use crate::schema::{input_schema_with, openai_strict};

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
    tools: Vec<Tool>,
    /// The commands with a `glob` param, whose schemas list the matches of the moment.
    globbed: Vec<String>,
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

impl ToolSet {
    /// The tools for `sandbox`'s commands (with the operator's `descriptions`) and, when
    /// given, the fetch tool. Every name is checked.
    pub fn new(
        sandbox: &Sandbox,
        descriptions: &BTreeMap<String, String>,
        fetch: Option<&FetchTool>,
    ) -> Result<ToolSet, Error> {
        let mut tools = Vec::new();
        let mut globbed = Vec::new();
        for command in sandbox.executor().spec().commands().commands() {
            let name = command.name();
            validate_name(name)?;
            if fetch.is_some() && name == FETCH_TOOL {
                return Err(Error::ToolName {
                    name: name.to_owned(),
                    why: "`fetch` is the fetch tool's name while a [fetch] table is configured; rename the command".into(),
                });
            }
            tools.push(command_tool(sandbox, command, descriptions.get(name)));
            let has_glob = command.params().values().any(|p| {
                matches!(&p.ty, agentguard_policy::ParamType::Path(rule) if rule.glob.is_some())
            });
            if has_glob {
                globbed.push(name.to_owned());
            }
        }
        if let Some(fetch) = fetch {
            tools.push(fetch_tool(fetch));
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ToolSet { tools, globbed })
    }

    /// The tools as they were made.
    pub fn definitions(&self) -> &[Tool] {
        &self.tools
    }

    /// The tools as `tools/list` lists them now: a `glob` param's schema lists the paths it
    /// matches at this moment.
    pub fn current(&self, sandbox: &Sandbox) -> Vec<Tool> {
        let spec = sandbox.executor().spec();
        self.tools
            .iter()
            .map(|tool| {
                let name = tool.name.as_ref();
                let command = spec.commands().get(name);
                match command {
                    Ok(command) if self.globbed.iter().any(|g| g == name) => {
                        let mut tool = tool.clone();
                        let matches = spec.for_command(name).glob_matches(name);
                        tool.input_schema = Arc::new(input_schema_with(command, &matches));
                        tool
                    }
                    _ => tool.clone(),
                }
            })
            .collect()
    }

    /// True when `name` is one of the tools.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// The definitions in `format`.
    pub fn export(&self, format: Format) -> Value {
        match format {
            Format::Mcp => json!({"tools": self.tools}),
            Format::Openai => self
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "name": t.name, "description": t.description, "parameters": openai_strict(&t.input_schema), "strict": true})
                })
                .collect(),
            Format::Anthropic => self
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
                .collect(),
        }
    }
}

/// One command's tool: what it runs and under which limits, from the enforced spec, and its
/// input schema from its params.
fn command_tool(sandbox: &Sandbox, command: &Command, description: Option<&String>) -> Tool {
    let name = command.name();
    // The command's own values: its workspace mode, paths and limits.
    let spec = sandbox.executor().spec().for_command(name);
    let argv = sanitize(&command.argv().join(" "));
    let network = sandbox.network_of(name).unwrap_or(Network::None);
    let mut network_text = match (network, sandbox.egress_hosts(name)) {
        (Network::Egress, Some([])) => {
            "network only through its own egress proxy, to no host but its routes".to_owned()
        }
        (Network::Egress, Some(hosts)) => format!(
            "network only through its own egress proxy, to {}",
            sanitize(&hosts.join(", "))
        ),
        _ => "no network".to_owned(),
    };
    let routes = sandbox.routes_of(name);
    if !routes.is_empty() {
        // What each route reaches, never its secret or its header's value.
        let port = sandbox.proxy_port();
        let each: Vec<String> = routes
            .iter()
            .map(|(r, env)| {
                let variable = env.map(|v| format!(", in ${v}")).unwrap_or_default();
                format!(
                    "http://127.0.0.1:{port}/{}{variable}: {} to {} for the paths {}, the credential added by the proxy",
                    r.name(),
                    r.methods().join(", "),
                    r.host(),
                    r.paths().join(", ")
                )
            })
            .collect();
        network_text.push_str(&format!(", and the routes {}", sanitize(&each.join("; "))));
    }
    let workspace = workspace_text(&spec);
    let takes = if command.params().is_empty() {
        "Takes no arguments; the command line is fixed by the operator's allowlist.".to_owned()
    } else {
        let names: Vec<&str> = command.params().keys().map(String::as_str).collect();
        format!(
            "Takes {}: each value is checked by AgentGuard against its declared type and placed as exactly one argv element, never given to a shell; the rest of the command line is fixed by the operator's allowlist.",
            names.join(", ")
        )
    };
    let facts = format!(
        "Runs the allowlisted command {name} ({argv}) in a hardened container: {network_text}, {workspace}, {} s timeout, output capped at {} bytes. {takes}",
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
    let writes = spec.writes_workspace();
    Tool::new(
        name.to_owned(),
        description,
        Arc::new(input_schema_with(command, &spec.glob_matches(name))),
    )
    .with_title(format!("{name} (AgentGuard)"))
    .with_annotations(
        ToolAnnotations::new()
            .read_only(!writes)
            .destructive(writes)
            .open_world(network == Network::Egress),
    )
}

/// What a command's workspace is, as its tool description says it.
fn workspace_text(spec: &ContainerSpec) -> String {
    let mut workspace = match spec.workspace().map(|(_, mode)| mode) {
        Some(WorkspaceMode::ReadOnly) => "the workspace mounted read-only at /workspace".to_owned(),
        Some(WorkspaceMode::ReadWrite) => {
            "the workspace mounted read-write at /workspace".to_owned()
        }
        None => "no workspace".to_owned(),
    };
    if !spec.writable().is_empty() {
        workspace.push_str(&format!(
            " (writable: {})",
            sanitize(&spec.writable().join(", "))
        ));
    }
    if !spec.hidden().is_empty() {
        workspace.push_str(&format!(
            ", with {} hidden",
            sanitize(&spec.hidden().join(", "))
        ));
    }
    workspace
}

fn fetch_tool(fetch: &FetchTool) -> Tool {
    let description = format!(
        "HTTP GET of an https URL on the allowlist ({}). Public addresses only, checked after one DNS resolution; redirects are not followed; the body is capped at {} bytes. Returns the HTTP status and the body.",
        sanitize(&fetch.hosts.join(", ")),
        fetch.max_bytes
    );
    let schema = json!({
        "type": "object",
        "properties": {"url": {"type": "string", "description": "An absolute https URL on an allowed host."}},
        "required": ["url"],
        "additionalProperties": false,
    });
    let schema = match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(FETCH_TOOL, description, Arc::new(schema))
        .with_title("fetch (AgentGuard)")
        .with_annotations(
            ToolAnnotations::new()
                .read_only(true)
                .destructive(false)
                .open_world(true),
        )
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

//! The server against rmcp's own client, in both protocol eras (the `initialize` handshake
//! and the stateless 2026-07-28 revision), over an in-memory pipe. The "containers" are
//! processes of test-support's fake engine, so every outcome happens for real: exit codes,
//! timeouts, floods, engine errors, cancellation (the process is gone), concurrency.

mod calls;
mod lifecycle;
mod params;
mod trace;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentguard_audit::{AuditSink, MemorySink};
use agentguard_container::{ContainerSpec, Engine};
use agentguard_mcp::{McpServer, ToolSet};
use agentguard_sandbox::Sandbox;
use agentguard_test_support::FakeEngine;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    JsonObject, ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;

/// The two protocol eras.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Era {
    Legacy,
    Modern,
}

pub(crate) const ERAS: [Era; 2] = [Era::Legacy, Era::Modern];

/// The commands of every test: one per outcome.
pub(crate) fn spec(engine: &FakeEngine, timeout: u64, check: bool) -> ContainerSpec {
    ContainerSpec::builder("localhost/tools:latest")
        .engine(Engine::parse(&engine.path().to_string_lossy()).unwrap())
        .timeout(Duration::from_secs(timeout))
        .max_output_bytes(4096)
        .check(check)
        .command("ok", ["echo", "all good"])
        .command("three", ["sh", "-c", "echo failing >&2; exit 3"])
        .command("flood", ["yes", "flood"])
        .command("sleepy", ["sleep", "30"])
        .command("second", ["sleep", "1"])
        .command(
            "engine_error",
            [
                "sh",
                "-c",
                "echo 'Error response from daemon: boom' >&2; exit 125",
            ],
        )
        .command(
            "noisy",
            [
                "printf",
                "\\033[31mred\\033[0m \\342\\200\\256evil\\342\\200\\254 \\342\\200\\213zw\\n",
            ],
        )
        .build()
        .unwrap()
}

/// A server over `spec`, its audit sink, and its stop token.
pub(crate) struct Fixture {
    pub(crate) engine: FakeEngine,
    pub(crate) audit: Arc<MemorySink>,
    pub(crate) server: McpServer,
}

impl Fixture {
    pub(crate) fn new(timeout: u64, check: bool, max_concurrent: usize) -> Fixture {
        let engine = FakeEngine::new();
        let audit = Arc::new(MemorySink::new(None));
        let sandbox = Sandbox::builder(spec(&engine, timeout, check))
            .audit(Arc::clone(&audit) as Arc<dyn AuditSink>)
            .build()
            .unwrap();
        let mut descriptions = std::collections::BTreeMap::new();
        descriptions.insert(
            "ok".to_owned(),
            "Say all is good.\u{1b}[2J\u{202e}".to_owned(),
        );
        let tools = ToolSet::new(&sandbox, &descriptions, None).unwrap();
        let server = McpServer::builder(sandbox, tools)
            .max_concurrent(max_concurrent)
            .audit(Arc::clone(&audit) as Arc<dyn AuditSink>)
            .progress_every(Duration::from_millis(100))
            .build()
            .unwrap();
        Fixture {
            engine,
            audit,
            server,
        }
    }

    /// Serves on an in-memory pipe and connects a client in `era`.
    pub(crate) async fn connect(&self, era: Era) -> RunningService<RoleClient, Client> {
        let (client_side, server_side) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(server_side);
        let server = self.server.clone();
        tokio::spawn(agentguard_mcp::serve(server, server_read, server_write));
        let client = Client::default();
        let lifecycle = match era {
            Era::Legacy => ClientLifecycleMode::Initialize,
            Era::Modern => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        };
        client
            .serve_with_lifecycle(tokio::io::split(client_side), lifecycle)
            .await
            .expect("the client connects")
    }
}

/// A client that keeps the progress notifications it receives.
#[derive(Clone, Default)]
pub(crate) struct Client {
    pub(crate) progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agentguard-tests", "7.1"),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

/// A call of `name` with `arguments`.
pub(crate) fn call(name: &str, arguments: Option<Value>) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    if let Some(Value::Object(map)) = arguments {
        params = params.with_arguments(JsonObject::from_iter(map));
    }
    params
}

/// The result object, after checking that it is both the structured content and the only
/// text block.
pub(crate) fn object(result: &CallToolResult) -> Value {
    assert_eq!(result.content.len(), 1, "{result:?}");
    let text = result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .expect("a text block");
    let parsed: Value = serde_json::from_str(&text).expect("the text block is JSON");
    assert_eq!(
        Some(&parsed),
        result.structured_content.as_ref(),
        "the same object twice"
    );
    parsed
}

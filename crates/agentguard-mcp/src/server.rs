//! The MCP server: `tools/list` from the [`ToolSet`], `tools/call` through the [`Sandbox`] (or
//! the fetcher), with a bound on concurrent runs, progress, cancellation that kills the run's
//! container by name, a stop that ends every run, and an `mcp_call` audit event per call.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentguard_audit::{AuditSink, Decision, Event};
use agentguard_container::OutputMeter;
use agentguard_netpin::Fetcher;
use agentguard_sandbox::Sandbox;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, NumberOrString, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::result::{self, Outcome};
use crate::tools::{FETCH_TOOL, ToolSet};

/// How often a run with a progress token reports (default).
pub const DEFAULT_PROGRESS_EVERY: Duration = Duration::from_secs(5);

const INSTRUCTIONS: &str = "Runs a fixed allowlist of commands in hardened containers. Tools take no free-form command lines. A denial is a policy decision; variations of the same request are denied the same way.";

/// The `agentguard mcp` server (cheap to clone: one shared state).
#[derive(Clone)]
pub struct McpServer {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) sandbox: Sandbox,
    pub(crate) tools: ToolSet,
    pub(crate) listed: Vec<Tool>,
    pub(crate) fetcher: Option<Fetcher>,
    pub(crate) check: bool,
    pub(crate) slots: Semaphore,
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    pub(crate) stop: CancellationToken,
    pub(crate) progress_every: Duration,
    pub(crate) running: Mutex<usize>,
}

impl McpServer {
    /// Cancelled to end the server: every run is stopped and its container killed.
    pub fn stop_token(&self) -> CancellationToken {
        self.inner.stop.clone()
    }

    /// How many calls are running now.
    pub fn running(&self) -> usize {
        *self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// How a run's wait ended.
enum Ended<T> {
    Done(T),
    Cancelled,
    Stopped,
}

/// Counts a run as running while it lives; if its call is dropped before the run concluded,
/// kills its container by name.
struct RunGuard {
    server: McpServer,
    container: String,
    concluded: bool,
}

impl RunGuard {
    fn new(server: McpServer, container: String) -> RunGuard {
        *server
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner) += 1;
        RunGuard {
            server,
            container,
            concluded: false,
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        *self
            .server
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner) -= 1;
        if !self.concluded {
            let server = self.server.clone();
            let container = std::mem::take(&mut self.container);
            tokio::spawn(async move { server.inner.sandbox.kill_by_name(&container).await });
        }
    }
}

/// Who called, for the audit log.
struct Caller {
    client: String,
    request_id: String,
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agentguard", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.inner.listed.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.inner.tools.contains(&name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {:?}", crate::present::sanitize(&name)),
                None,
            ));
        }
        let caller = Caller {
            client: context.client_info().map_or_else(
                || "unknown".to_owned(),
                |c| format!("{}/{}", c.name, c.version),
            ),
            request_id: match &context.id {
                NumberOrString::Number(n) => n.to_string(),
                NumberOrString::String(s) => s.to_string(),
            },
        };
        let outcome = if name == FETCH_TOOL {
            self.fetch(request.arguments.as_ref(), &caller).await
        } else {
            self.run(&name, request.arguments.as_ref(), &context, &caller)
                .await
        };
        Ok(to_result(outcome).into())
    }
}

impl McpServer {
    async fn run(
        &self,
        name: &str,
        arguments: Option<&JsonObject>,
        context: &RequestContext<RoleServer>,
        caller: &Caller,
    ) -> Outcome {
        if arguments.is_some_and(|a| !a.is_empty()) {
            let outcome = result::arguments_not_accepted(name, "no arguments");
            self.record(name, caller, Decision::Deny, &outcome, None);
            return outcome;
        }
        let _permit = match self.slot(name, context).await {
            Ok(permit) => permit,
            Err(outcome) => {
                self.record(name, caller, Decision::Error, &outcome, None);
                return outcome;
            }
        };
        let meter = OutputMeter::new();
        let identity = agentguard_container::RunIdentity {
            meter: Some(meter.clone()),
            ..self.inner.sandbox.identity()
        };
        let mut guard = RunGuard::new(self.clone(), identity.name.clone());
        let ended = self.wait(name, &identity, &meter, context).await;
        let outcome = self.conclude(name, caller, &identity.name, ended).await;
        guard.concluded = true;
        outcome
    }

    /// A run slot, waited for within the command's own timeout.
    async fn slot(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, Outcome> {
        let inner = &self.inner;
        let timeout = inner.sandbox.executor().spec().timeout();
        let permit = tokio::select! {
            permit = inner.slots.acquire() => permit.ok(),
            () = tokio::time::sleep(timeout) => None,
            () = context.ct.cancelled() => None,
            () = inner.stop.cancelled() => None,
        };
        permit.ok_or_else(|| {
            result::refused(
                name,
                "error",
                "busy",
                &format!(
                    "every run slot stayed busy for the command's whole timeout ({} s); try again later",
                    timeout.as_secs()
                ),
                true,
            )
        })
    }

    /// Runs `name` until it ends, the call is cancelled or the server stops, reporting
    /// progress when the call asked for it. The run's future is dropped when this returns:
    /// its proxy stops and its folder goes.
    async fn wait(
        &self,
        name: &str,
        identity: &agentguard_container::RunIdentity,
        meter: &OutputMeter,
        context: &RequestContext<RoleServer>,
    ) -> Ended<Result<agentguard_sandbox::Finished, agentguard_sandbox::Error>> {
        let inner = &self.inner;
        let timeout = inner.sandbox.executor().spec().timeout();
        let run = inner.sandbox.run_with(name, identity);
        tokio::pin!(run);
        let token = context.meta.get_progress_token();
        let start = tokio::time::Instant::now();
        let mut ticker =
            tokio::time::interval_at(start + inner.progress_every, inner.progress_every);
        loop {
            tokio::select! {
                outcome = &mut run => return Ended::Done(outcome),
                () = context.ct.cancelled() => return Ended::Cancelled,
                () = inner.stop.cancelled() => return Ended::Stopped,
                _ = ticker.tick(), if token.is_some() => {
                    let elapsed = start.elapsed().as_secs_f64();
                    let message = format!(
                        "{name}: running {elapsed:.0} s / {} s, {} bytes of output",
                        timeout.as_secs(),
                        meter.bytes()
                    );
                    if let Some(token) = token.clone() {
                        let param = ProgressNotificationParam::new(token, elapsed)
                            .with_total(timeout.as_secs_f64())
                            .with_message(message);
                        let _ = context.peer.notify_progress(param).await;
                    }
                }
            }
        }
    }

    /// The outcome of a run as it ended, recorded; a cancelled or stopped run's container is
    /// killed by name first.
    async fn conclude(
        &self,
        name: &str,
        caller: &Caller,
        container: &str,
        ended: Ended<Result<agentguard_sandbox::Finished, agentguard_sandbox::Error>>,
    ) -> Outcome {
        let inner = &self.inner;
        let (decision, outcome) = match ended {
            Ended::Done(Ok(finished)) => (
                Decision::Allow,
                result::finished(name, &finished, inner.check),
            ),
            Ended::Done(Err(agentguard_sandbox::Error::Failed(finished))) => (
                Decision::Allow,
                result::finished(name, &finished, inner.check),
            ),
            Ended::Done(Err(error)) => {
                let outcome = result::run_error(name, &error);
                let decision = if outcome.value["status"] == "denied" {
                    Decision::Deny
                } else {
                    Decision::Error
                };
                (decision, outcome)
            }
            Ended::Cancelled | Ended::Stopped => {
                inner.sandbox.kill_by_name(container).await;
                // The end of the input also cancels every request: that is the stop.
                let (reason, why) = if inner.stop.is_cancelled() {
                    ("shutting_down", "the server is shutting down")
                } else {
                    ("cancelled", "the client cancelled the call")
                };
                let message = format!("{why}; container {container} was killed and removed");
                (
                    Decision::Error,
                    result::refused(name, "error", reason, &message, true),
                )
            }
        };
        self.record(name, caller, decision, &outcome, Some(container));
        outcome
    }

    async fn fetch(&self, arguments: Option<&JsonObject>, caller: &Caller) -> Outcome {
        let url = arguments.and_then(|a| match (a.len(), a.get("url")) {
            (1, Some(serde_json::Value::String(url))) => Some(url.clone()),
            _ => None,
        });
        let (Some(url), Some(fetcher)) = (url, &self.inner.fetcher) else {
            let outcome = result::arguments_not_accepted(
                FETCH_TOOL,
                "exactly one argument, `url` (a string)",
            );
            self.record(FETCH_TOOL, caller, Decision::Deny, &outcome, None);
            return outcome;
        };
        let start = Instant::now();
        let outcome = tokio::select! {
            got = fetcher.get(&url) => match got {
                Ok(response) => result::fetched(&response, start.elapsed().as_millis() as u64),
                Err(error) => result::fetch_error(&error),
            },
            () = self.inner.stop.cancelled() => result::refused(FETCH_TOOL, "error", "shutting_down", "the server is shutting down", true),
        };
        let decision = match outcome.value["status"].as_str() {
            Some("fetched") => Decision::Allow,
            Some("denied") => Decision::Deny,
            _ => Decision::Error,
        };
        self.record(FETCH_TOOL, caller, decision, &outcome, None);
        outcome
    }

    /// One `mcp_call` event; a log that cannot be written is reported on stderr, since the
    /// run itself (if any) was recorded by the sandbox before.
    fn record(
        &self,
        tool: &str,
        caller: &Caller,
        decision: Decision,
        outcome: &Outcome,
        container: Option<&str>,
    ) {
        let Some(sink) = &self.inner.audit else {
            return;
        };
        let value = &outcome.value;
        let mut event = Event::mcp_call(decision, outcome.reason(), tool, &caller.client)
            .data("request_id", caller.request_id.as_str());
        if let Some(container) = container {
            event = event.data("container", container);
        }
        if let Some(status) = value["status"]
            .as_str()
            .filter(|s| *s != "denied" && *s != "error" && *s != "fetched")
        {
            event = event.data("run_status", status);
        }
        if !value["exit_code"].is_null() || value.get("exit_code").is_some() {
            event = event.data("exit_code", value["exit_code"].clone());
        }
        if let Some(ms) = value["duration_ms"].as_u64() {
            event = event.data("duration_ms", ms);
        }
        if let Err(e) = sink.record(event) {
            tracing::error!(error = %e, tool, "recording the MCP call in the audit log failed");
        }
    }
}

/// The result object as `structuredContent` and as the only text block.
fn to_result(outcome: Outcome) -> CallToolResult {
    let text = outcome.value.to_string();
    let mut result = if outcome.is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(outcome.value);
    result
}

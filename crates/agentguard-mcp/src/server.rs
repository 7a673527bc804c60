//! The MCP server: `tools/list` from the [`ToolSet`], `tools/call` checked by the [`Sandbox`]
//! and run by its [`Runner`] (the sandbox itself, or a cluster), or the fetcher, with a bound
//! on concurrent runs, progress, cancellation that kills the run by name, a stop that ends
//! every run, and an `mcp_call` audit event per call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentguard_audit::{AuditSink, Decision, error_chain};
use agentguard_container::{OutputMeter, RunIdentity};
use agentguard_netpin::Fetcher;
use agentguard_policy::Invocation;
use agentguard_sandbox::{Finished, Sandbox};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, NumberOrString, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::event::{Caller, Concluded};
use crate::result::{self, Outcome};
use crate::runner::Runner;
use crate::tools::{FETCH_TOOL, ToolSet};

/// How often a run with a progress token reports (default).
pub const DEFAULT_PROGRESS_EVERY: Duration = Duration::from_secs(5);

const INSTRUCTIONS: &str = "Runs a fixed allowlist of commands in hardened containers. Tools take no free-form command lines: a tool with parameters takes typed values, each checked and placed as one argument. A denial is a policy decision; variations of the same request are denied the same way.";

/// The `agentguard mcp` server (cheap to clone: one shared state).
#[derive(Clone)]
pub struct McpServer {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// Checks each call: its command, its arguments, the spec's timeout; names each run.
    pub(crate) sandbox: Arc<Sandbox>,
    /// Runs what was checked.
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) tools: ToolSet,
    pub(crate) fetcher: Option<Fetcher>,
    pub(crate) check: bool,
    pub(crate) slots: Semaphore,
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
    pub(crate) stop: CancellationToken,
    pub(crate) progress_every: Duration,
    /// Every call in flight holds a token; the stop waits for them.
    pub(crate) calls: TaskTracker,
}

impl McpServer {
    /// Cancelled to end the server: every run is stopped and its container killed.
    pub fn stop_token(&self) -> CancellationToken {
        self.inner.stop.clone()
    }

    /// How many calls are in flight now.
    pub fn running(&self) -> usize {
        self.inner.calls.len()
    }

    /// The calls in flight, to wait for once the server stops.
    pub(crate) fn calls(&self) -> &TaskTracker {
        &self.inner.calls
    }
}

/// How a run's wait ended.
enum Ended<T> {
    Done(T),
    Cancelled,
    Stopped,
}

/// If its call is dropped before the run concluded, kills the run's container by name.
struct RunGuard {
    server: McpServer,
    container: String,
    concluded: bool,
}

impl RunGuard {
    fn new(server: McpServer, container: String) -> RunGuard {
        RunGuard {
            server,
            container,
            concluded: false,
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if !self.concluded {
            let server = self.server.clone();
            let container = std::mem::take(&mut self.container);
            tokio::spawn(async move { server.inner.runner.kill(&container).await });
        }
    }
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
        Ok(ListToolsResult::with_all_items(
            self.inner.tools.current(&self.inner.sandbox),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _in_flight = self.inner.calls.token();
        let name = request.name.to_string();
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
        if !self.inner.tools.contains(&name) {
            // Recorded too: every call leaves its trace, whatever the client sends.
            let outcome =
                result::refused(&name, Decision::Deny, "unknown_tool", "no such tool", false);
            let _ = crate::event::record(
                self.inner.audit.as_deref(),
                &name,
                &caller,
                Concluded::new(outcome),
            );
            return Err(ErrorData::invalid_params(
                format!("unknown tool {:?}", crate::present::sanitize(&name)),
                None,
            ));
        }
        // A command may be named `fetch` when no [fetch] table is configured: it is a command.
        let concluded = if name == FETCH_TOOL && self.inner.fetcher.is_some() {
            self.fetch(request.arguments.as_ref()).await
        } else {
            self.run(&name, request.arguments.as_ref(), &context).await
        };
        let outcome =
            match crate::event::record(self.inner.audit.as_deref(), &name, &caller, concluded) {
                Ok(outcome) => outcome,
                // No trace, no answer: the result is withheld.
                Err(error) => result::refused(
                    &name,
                    Decision::Error,
                    "audit_failed",
                    &format!(
                        "the call's audit event could not be recorded ({}); its result is withheld",
                        error_chain(&error)
                    ),
                    false,
                ),
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
    ) -> Concluded {
        let sandbox = &self.inner.sandbox;
        let takes_params = sandbox
            .executor()
            .spec()
            .commands()
            .get(name)
            .is_ok_and(|c| !c.params().is_empty());
        if !takes_params && arguments.is_some_and(|a| !a.is_empty()) {
            return Concluded::new(result::arguments_not_accepted(name, "no arguments"));
        }
        // Checked once, here, by the policy crate's validator (the schema only guides the
        // model); a refusal is recorded as the run's `container_run` event.
        let invocation = match sandbox.invoke(name, &crate::schema::arguments(arguments)) {
            Ok(invocation) => invocation,
            Err(error) => return Concluded::new(result::run_error(name, &error)),
        };
        let _permit = match self.slot(name, context).await {
            Ok(permit) => permit,
            Err(outcome) => return Concluded::new(outcome),
        };
        let meter = OutputMeter::new();
        let mut identity = sandbox.identity();
        // The run's `container_run` names the client too (`invoker.client`).
        identity.client = context
            .client_info()
            .map(|c| format!("{}/{}", c.name, c.version));
        let mut guard = RunGuard::new(self.clone(), identity.name.clone());
        let ended = self.wait(&invocation, &identity, &meter, context).await;
        let outcome = self.conclude(&invocation, &identity.name, ended).await;
        guard.concluded = true;
        Concluded {
            outcome,
            container: Some(identity.name),
            params: invocation.params().to_vec(),
        }
    }

    /// A run slot, waited for within the command's own timeout.
    async fn slot(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, Outcome> {
        let inner = &self.inner;
        let timeout = inner.sandbox.executor().spec().for_command(name).timeout();
        let wait = tokio::select! {
            permit = inner.slots.acquire() => permit.map_err(|_| "shutting_down"),
            () = tokio::time::sleep(timeout) => Err("busy"),
            () = context.ct.cancelled() => Err(if inner.stop.is_cancelled() { "shutting_down" } else { "cancelled" }),
            () = inner.stop.cancelled() => Err("shutting_down"),
        };
        wait.map_err(|reason| {
            let message = match reason {
                "busy" => format!(
                    "every run slot stayed busy for the command's whole timeout ({} s); try again later",
                    timeout.as_secs()
                ),
                "cancelled" => "the client cancelled the call while it waited for a run slot; nothing was started".to_owned(),
                _ => "the server is shutting down; nothing was started".to_owned(),
            };
            result::refused(name, Decision::Error, reason, &message, true)
        })
    }

    /// Runs `name` until it ends, the call is cancelled or the server stops, reporting
    /// progress when the call asked for it. The run's future is dropped when this returns:
    /// its proxy stops and its folder goes.
    async fn wait(
        &self,
        invocation: &Invocation,
        identity: &RunIdentity,
        meter: &OutputMeter,
        context: &RequestContext<RoleServer>,
    ) -> Ended<Result<Finished, Outcome>> {
        let inner = &self.inner;
        let name = invocation.command();
        let timeout = inner.sandbox.executor().spec().for_command(name).timeout();
        let run = inner.runner.run(invocation, identity, meter);
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

    /// The outcome of a run as it ended; a cancelled or stopped run's container is killed by
    /// name first, and its `container_run` event recorded (its dropped future recorded none).
    async fn conclude(
        &self,
        invocation: &Invocation,
        container: &str,
        ended: Ended<Result<Finished, Outcome>>,
    ) -> Outcome {
        let inner = &self.inner;
        let name = invocation.command();
        match ended {
            Ended::Done(Ok(finished)) => result::finished(name, &finished, inner.check),
            Ended::Done(Err(outcome)) => outcome,
            Ended::Cancelled | Ended::Stopped => {
                inner.runner.kill(container).await;
                // The end of the input also cancels every request: that is the stop.
                let (reason, why) = if inner.stop.is_cancelled() {
                    ("shutting_down", "the server is shutting down")
                } else {
                    ("cancelled", "the client cancelled the call")
                };
                match inner.runner.record_stopped(name, container, reason) {
                    Ok(()) => result::refused(
                        name,
                        Decision::Error,
                        reason,
                        &format!("{why}; container {container} was killed and removed"),
                        true,
                    ),
                    Err(error) => result::refused(
                        name,
                        Decision::Error,
                        "audit_failed",
                        &format!(
                            "{why}; container {container} was killed and removed, but its audit event could not be recorded ({error})"
                        ),
                        false,
                    ),
                }
            }
        }
    }

    /// The fetch tool; the fetcher records its own `fetch` event (URL, address, status,
    /// bytes) before it returns, as `agentguard fetch --audit` does.
    async fn fetch(&self, arguments: Option<&JsonObject>) -> Concluded {
        let url = arguments.and_then(|a| match (a.len(), a.get("url")) {
            (1, Some(serde_json::Value::String(url))) => Some(url.clone()),
            _ => None,
        });
        let (Some(url), Some(fetcher)) = (url, &self.inner.fetcher) else {
            return Concluded::new(result::arguments_not_accepted(
                FETCH_TOOL,
                "exactly one argument, `url` (a string)",
            ));
        };
        let start = Instant::now();
        Concluded::new(tokio::select! {
            got = fetcher.get(&url) => match got {
                Ok(response) => result::fetched(&response, start.elapsed().as_millis() as u64),
                Err(error) => result::fetch_error(&error),
            },
            () = self.inner.stop.cancelled() => result::refused(
                FETCH_TOOL,
                Decision::Error,
                "shutting_down",
                "the server is shutting down",
                true,
            ),
        })
    }
}

/// The result object as `structuredContent` and as the only text block.
pub(crate) fn to_result(outcome: Outcome) -> CallToolResult {
    let text = outcome.value.to_string();
    let mut result = if outcome.is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(outcome.value);
    result
}

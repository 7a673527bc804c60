//! The wire gate between the client's byte streams and rmcp: every line is read first here
//! (`wire.rs`), so that nothing a client sends goes unanswered or, for a `tools/call`,
//! unrecorded. A line that is not a message (not JSON, not UTF-8, over 16 MiB, a batch) is
//! answered with a JSON-RPC error and skipped; a `tools/call` rmcp would refuse before the
//! server saw it (a malformed shape, a call before the session began) is answered and gets
//! its `mcp_call` event here; a call whose argument values only a raw reading sees (a repeated
//! key, `1e400`, a lone surrogate) is refused by the server's own checks (`refuse_raw`).
//! Everything else goes to rmcp unchanged. rmcp's answers and the gate's reach the client
//! through one writer, a whole line at a time.

use agentguard_audit::{Decision, error_chain};
use rmcp::ErrorData;
use rmcp::model::CallToolResult;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::event::{Caller, Concluded};
use crate::result;
use crate::server::{McpServer, to_result};
use crate::tools::FETCH_TOOL;
use crate::wire::{self, Call, Line, MAX_LINE_BYTES};

/// What the gate knows of the session.
struct Session {
    server: McpServer,
    /// `initialize` was seen.
    initialized: bool,
    /// The client's `name/version` from `initialize`.
    client: String,
    answers: mpsc::UnboundedSender<String>,
}

/// Reads the client's lines from `input` until it ends (then cancels `eof`), forwarding what
/// rmcp should read to `to_rmcp` and sending the gate's own answers to `answers`.
pub(crate) async fn read_input<R, W>(
    server: McpServer,
    input: R,
    mut to_rmcp: W,
    answers: mpsc::UnboundedSender<String>,
    eof: CancellationToken,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut session = Session {
        server,
        initialized: false,
        client: "unknown".to_owned(),
        answers,
    };
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let end = match next_line(&mut input, &mut line).await {
            Ok(Some(end)) => end,
            Ok(None) | Err(_) => break,
        };
        let forward = match end {
            End::Whole => session.decide(&line),
            End::TooLong => {
                session.error(
                    None,
                    -32600,
                    &format!("the message is over {MAX_LINE_BYTES} bytes; it was skipped"),
                );
                false
            }
        };
        if forward {
            line.push(b'\n');
            if to_rmcp.write_all(&line).await.is_err() || to_rmcp.flush().await.is_err() {
                break;
            }
        }
    }
    eof.cancel();
}

/// How a line ended.
enum End {
    Whole,
    /// Over the limit: what was read is dropped, the rest of the line skipped.
    TooLong,
}

/// Reads one line into `line` (without its newline), at most [`MAX_LINE_BYTES`] of it kept;
/// `None` at the end of the input (a last line without a newline is still a line).
async fn next_line<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<End>> {
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok((too_long || !line.is_empty()).then_some(if too_long {
                End::TooLong
            } else {
                End::Whole
            }));
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (&available[..at], at + 1),
            None => (available, available.len()),
        };
        if !too_long && line.len() + chunk.len() <= MAX_LINE_BYTES {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line.clear();
        }
        let newline = done > chunk.len();
        input.consume(done);
        if newline {
            return Ok(Some(if too_long { End::TooLong } else { End::Whole }));
        }
    }
}

impl Session {
    /// Answers or forwards one whole line: true to hand it to rmcp.
    fn decide(&mut self, line: &[u8]) -> bool {
        let trimmed = line.strip_suffix(b"\r").unwrap_or(line);
        if trimmed.iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        let (id, method, params, strict) = match wire::read(trimmed) {
            Line::Unreadable(code, why) => {
                self.error(None, code, &why);
                return false;
            }
            Line::Message {
                id,
                method,
                params,
                strict,
            } => (id, method, params, strict),
        };
        match method.as_str() {
            "tools/call" if id.is_some() => return self.call(id, params, strict),
            // Stopped: the calls are ending and the service with them; nothing new is served
            // (a request could otherwise slip in before the service closes).
            _ if self.server.stop_token().is_cancelled() => {
                if id.is_some() {
                    self.error(
                        id,
                        -32000,
                        "the server is shutting down; no new request is served",
                    );
                }
                return false;
            }
            "initialize" => {
                self.initialized = true;
                if let Some(info) = params.and_then(client_info) {
                    self.client = info;
                }
            }
            _ => {}
        }
        if !strict {
            if id.is_some() {
                let why = "Invalid request: a value could not be read (a number out of range, an escape that is no character) or a key is repeated";
                self.error(id, -32600, why);
            }
            return false;
        }
        true
    }

    /// A `tools/call`: forwarded, or answered and recorded here.
    fn call(&mut self, id: Option<&RawValue>, params: Option<&RawValue>, strict: bool) -> bool {
        let caller = Caller {
            client: self.client.clone(),
            request_id: id.map_or_else(String::new, |i| i.get().trim_matches('"').to_owned()),
        };
        let modern =
            params.is_some_and(|p| p.get().contains("io.modelcontextprotocol/protocolVersion"));
        match wire::call(params, self.initialized) {
            Call::Forward if strict => true,
            Call::Forward => {
                let why = "a value in the call could not be read (a number out of range, an escape that is no character) or a key is repeated";
                self.refuse(id, &caller, "invalid_request", "", why);
                false
            }
            Call::Refused(reason, tool, why) => {
                self.refuse(id, &caller, reason, &tool, &why);
                false
            }
            Call::Arguments(tool, args) => {
                match self.server.refuse_raw(&tool, &args, &caller) {
                    Ok(result) => {
                        let mut result = serde_json::to_value(result).unwrap_or(Value::Null);
                        if modern && let Some(object) = result.as_object_mut() {
                            object.insert("resultType".into(), json!("complete"));
                        }
                        self.send(json!({"jsonrpc": "2.0", "id": raw(id), "result": result}));
                    }
                    Err(error) => self.error(id, error.code.0.into(), &error.message),
                }
                false
            }
        }
    }

    /// Records the refused call's `mcp_call` event and answers its JSON-RPC error.
    fn refuse(
        &self,
        id: Option<&RawValue>,
        caller: &Caller,
        reason: &'static str,
        tool: &str,
        why: &str,
    ) {
        let outcome = crate::result::refused(tool, Decision::Deny, reason, why, false);
        let audit = self.server.inner.audit.as_deref();
        if let Err(error) = crate::event::record(audit, tool, caller, Concluded::new(outcome)) {
            tracing::error!(error = %error, "the refused call's audit event could not be recorded");
        }
        self.error(id, -32602, &format!("Invalid params ({reason}): {why}"));
    }

    fn error(&self, id: Option<&RawValue>, code: i64, message: &str) {
        self.send(
            json!({"jsonrpc": "2.0", "id": raw(id), "error": {"code": code, "message": message}}),
        );
    }

    fn send(&self, message: Value) {
        let _ = self.answers.send(message.to_string());
    }
}

impl McpServer {
    /// A call whose arguments only the wire gate could read (a repeated key, a value no full
    /// parse reads): refused by the checks every call gets, recorded, answered.
    pub(crate) fn refuse_raw(
        &self,
        name: &str,
        args: &[(String, agentguard_policy::Arg)],
        caller: &Caller,
    ) -> Result<CallToolResult, ErrorData> {
        let inner = &self.inner;
        let record = |outcome| {
            crate::event::record(
                inner.audit.as_deref(),
                name,
                caller,
                Concluded::new(outcome),
            )
        };
        if !inner.tools.contains(name) {
            let _ = record(result::refused(
                name,
                Decision::Deny,
                "unknown_tool",
                "no such tool",
                false,
            ));
            let name = crate::present::sanitize(name);
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name:?}"),
                None,
            ));
        }
        let takes_params = inner
            .sandbox
            .executor()
            .spec()
            .commands()
            .get(name)
            .is_ok_and(|c| !c.params().is_empty());
        let outcome = if name == FETCH_TOOL && inner.fetcher.is_some() {
            result::arguments_not_accepted(FETCH_TOOL, "exactly one argument, `url` (a string)")
        } else if !takes_params {
            result::arguments_not_accepted(name, "no arguments")
        } else {
            match inner.sandbox.invoke(name, args) {
                Err(error) => result::run_error(name, &error),
                // Not reached: a repeated key or an unreadable value is always refused.
                Ok(_) => result::refused(
                    name,
                    Decision::Deny,
                    "invalid_arguments",
                    "the arguments could not be read",
                    false,
                ),
            }
        };
        let outcome = record(outcome).unwrap_or_else(|error| {
            let why = format!(
                "the call's audit event could not be recorded ({})",
                error_chain(&error)
            );
            result::refused(name, Decision::Error, "audit_failed", &why, false)
        });
        Ok(to_result(outcome))
    }
}

/// A raw id as a JSON value (`null` when absent or unreadable).
fn raw(id: Option<&RawValue>) -> Value {
    id.and_then(|i| serde_json::from_str(i.get()).ok())
        .unwrap_or(Value::Null)
}

/// `name/version` of `initialize`'s `clientInfo`.
fn client_info(params: &RawValue) -> Option<String> {
    let params: Value = serde_json::from_str(params.get()).ok()?;
    let info = params.get("clientInfo")?;
    Some(format!(
        "{}/{}",
        info.get("name")?.as_str()?,
        info.get("version").and_then(Value::as_str).unwrap_or("")
    ))
}

/// Writes rmcp's lines (from `from_rmcp`) and the gate's answers to `output`, each whole,
/// until rmcp's side ends.
pub(crate) async fn write_output<R, W>(
    from_rmcp: R,
    mut output: W,
    mut answers: mpsc::UnboundedReceiver<String>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut from_rmcp = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    loop {
        tokio::select! {
            read = from_rmcp.read_until(b'\n', &mut line) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.ends_with(b"\n") => {
                        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                            return;
                        }
                        line.clear();
                    }
                    Ok(_) => {}
                }
            }
            Some(answer) = answers.recv() => {
                let whole = format!("{answer}\n");
                if output.write_all(whole.as_bytes()).await.is_err() || output.flush().await.is_err() {
                    return;
                }
            }
        }
    }
    while let Ok(answer) = answers.try_recv() {
        let _ = output.write_all(format!("{answer}\n").as_bytes()).await;
    }
    let _ = output.flush().await;
}

//! The answers the proxy gives: one status per kind of refusal, with a stable reason code.
//!
//! Every refusal carries the reason code in the `X-AgentGuard-Reason` header and in a short
//! body that says whether it was a policy decision (so an agent does not retry around it) or
//! an upstream failure, and then the connection is closed.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The reply to a successful CONNECT, sent only after the upstream dial succeeded.
pub(crate) const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

/// A refusal: status, reason code, and the sentence for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl Refusal {
    pub(crate) fn new(status: u16, reason: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            reason,
            message: message.into(),
        }
    }

    /// True for refusals made by policy or limits (4xx), false for upstream failures (5xx).
    pub(crate) fn is_policy(&self) -> bool {
        self.status < 500
    }

    fn status_text(&self) -> &'static str {
        match self.status {
            400 => "Bad Request",
            403 => "Forbidden",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "Error",
        }
    }

    /// The full HTTP response.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let kind = if self.is_policy() {
            "This is a policy decision of the agentguard egress proxy; retrying or rephrasing the request will not change it."
        } else {
            "The agentguard egress proxy could not reach the upstream; this is not a policy decision."
        };
        let body = format!(
            "{} {}: {}\n{kind}\n",
            self.status,
            self.reason,
            self.message.replace(['\r', '\n'], " ")
        );
        let allow = if self.status == 405 {
            "Allow: CONNECT\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 {} {}\r\n{allow}X-AgentGuard-Reason: {}\r\nX-AgentGuard-Decision: {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            self.status_text(),
            self.reason,
            if self.is_policy() { "policy" } else { "upstream-error" },
            body.len(),
        )
        .into_bytes()
    }
}

/// Writes the refusal and closes the connection, first reading (and discarding) what the
/// client still sends for a moment, so that closing with unread data does not reset the
/// connection before the client has read the answer.
pub(crate) async fn refuse(mut stream: TcpStream, refusal: &Refusal) {
    if stream.write_all(&refusal.to_bytes()).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    let linger = async {
        while drained < 64 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), linger).await;
}

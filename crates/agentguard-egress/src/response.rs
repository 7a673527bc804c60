//! The answers the proxy gives: one typed table of refusals, each with its status and stable
//! reason code.
//!
//! Every refusal carries the reason code in the `X-AgentGuard-Reason` header and in a short
//! body that says whether it was a policy decision (so an agent does not retry around it) or
//! an upstream failure, and then the connection is closed. Codes that the policy or netpin
//! define are taken from them, never retyped here, so one condition has one code everywhere.

use std::time::Duration;

use agentguard_audit::Decision;
use agentguard_netpin::reason as netpin;
use agentguard_policy::Reason;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The reply to a successful CONNECT, sent only after the upstream dial succeeded.
pub(crate) const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

/// Every way the proxy refuses a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// The request line or a header line is malformed.
    MalformedRequest,
    /// The CONNECT target is not a valid `host:port`.
    MalformedTarget,
    /// The method is not CONNECT.
    MethodNotAllowed,
    /// The head did not arrive within its deadline.
    HeadTimeout,
    /// The head is larger than its limit.
    HeadTooLarge,
    /// Policy refused the port, the host, or an address (the policy's own reason).
    Denied(Reason),
    /// The name resolved to more addresses than are considered.
    TooManyAnswers,
    /// The name did not resolve.
    DnsFailure,
    /// Every checked address refused the connection.
    ConnectFailed,
    /// No checked address answered within the connect timeout.
    DialTimeout,
    /// The connection cap is reached.
    TooManyConnections,
    /// The decision could not be recorded, so no tunnel is opened.
    AuditFailed,
    /// The proxy ran out of file descriptors (for the client, the resolver or the dial).
    OutOfDescriptors,
    /// A route request names a route this run was not granted.
    RouteNotAllowed,
    /// A route request's path is outside the route's prefixes, or breaks a path rule.
    PathNotAllowed,
    /// A route request's body is larger than the route's cap.
    BodyTooLarge,
    /// The TLS handshake with a route's upstream failed (certificate, CA, protocol).
    TlsFailed,
    /// The HTTP exchange with a route's upstream failed.
    UpstreamFailed,
    /// A route's upstream answered with a compressed body, which could hide the secret from
    /// redaction.
    EncodedResponse,
    /// A route's upstream did not answer within the response timeout.
    ResponseTimeout,
    /// A route's upstream answered 206 Partial Content, which could return the secret in
    /// pieces (the client's `Range` is never sent).
    PartialResponse,
    /// The proxy stopped while the request was being decided (its name may have reached the
    /// resolver, so it is recorded).
    ShuttingDown,
}

impl RefusalKind {
    /// Every kind, with each policy reason the proxy can report: the table docs/egress.md
    /// documents (tidy checks the two agree).
    pub const ALL: &[RefusalKind] = &[
        RefusalKind::MalformedRequest,
        RefusalKind::MalformedTarget,
        RefusalKind::Denied(Reason::PortNotAllowed),
        RefusalKind::Denied(Reason::DomainNotAllowed),
        RefusalKind::Denied(Reason::IpLiteralNotAllowed),
        RefusalKind::Denied(Reason::NonPublicAddress),
        RefusalKind::Denied(Reason::NoAddresses),
        RefusalKind::TooManyAnswers,
        RefusalKind::MethodNotAllowed,
        RefusalKind::HeadTimeout,
        RefusalKind::HeadTooLarge,
        RefusalKind::DnsFailure,
        RefusalKind::ConnectFailed,
        RefusalKind::TooManyConnections,
        RefusalKind::AuditFailed,
        RefusalKind::OutOfDescriptors,
        RefusalKind::DialTimeout,
        RefusalKind::RouteNotAllowed,
        RefusalKind::PathNotAllowed,
        RefusalKind::BodyTooLarge,
        RefusalKind::TlsFailed,
        RefusalKind::UpstreamFailed,
        RefusalKind::EncodedResponse,
        RefusalKind::PartialResponse,
        RefusalKind::ResponseTimeout,
        RefusalKind::ShuttingDown,
    ];

    /// The HTTP status.
    pub const fn status(self) -> u16 {
        match self {
            RefusalKind::MalformedRequest | RefusalKind::MalformedTarget => 400,
            RefusalKind::Denied(_)
            | RefusalKind::TooManyAnswers
            | RefusalKind::RouteNotAllowed
            | RefusalKind::PathNotAllowed => 403,
            RefusalKind::MethodNotAllowed => 405,
            RefusalKind::HeadTimeout => 408,
            RefusalKind::BodyTooLarge => 413,
            RefusalKind::HeadTooLarge => 431,
            RefusalKind::DnsFailure
            | RefusalKind::ConnectFailed
            | RefusalKind::TlsFailed
            | RefusalKind::UpstreamFailed
            | RefusalKind::EncodedResponse
            | RefusalKind::PartialResponse => 502,
            RefusalKind::TooManyConnections
            | RefusalKind::AuditFailed
            | RefusalKind::OutOfDescriptors
            | RefusalKind::ShuttingDown => 503,
            RefusalKind::DialTimeout | RefusalKind::ResponseTimeout => 504,
        }
    }

    /// The stable reason code.
    pub const fn code(self) -> &'static str {
        match self {
            RefusalKind::MalformedRequest => "malformed_request",
            RefusalKind::MalformedTarget => "malformed_target",
            RefusalKind::MethodNotAllowed => "method_not_allowed",
            RefusalKind::HeadTimeout => "head_timeout",
            RefusalKind::HeadTooLarge => "head_too_large",
            RefusalKind::Denied(reason) => reason.code(),
            RefusalKind::TooManyAnswers => netpin::TOO_MANY_ANSWERS,
            RefusalKind::DnsFailure => netpin::DNS_FAILURE,
            RefusalKind::ConnectFailed => netpin::CONNECT_FAILED,
            RefusalKind::DialTimeout => netpin::DIAL_TIMEOUT,
            RefusalKind::TooManyConnections => "too_many_connections",
            RefusalKind::AuditFailed => "audit_failed",
            RefusalKind::OutOfDescriptors => "out_of_descriptors",
            RefusalKind::RouteNotAllowed => "route_not_allowed",
            RefusalKind::PathNotAllowed => "path_not_allowed",
            RefusalKind::BodyTooLarge => "body_too_large",
            RefusalKind::TlsFailed => "tls_error",
            RefusalKind::UpstreamFailed => "http_error",
            RefusalKind::EncodedResponse => "encoded_response",
            RefusalKind::ResponseTimeout => "response_timeout",
            RefusalKind::PartialResponse => "partial_response",
            RefusalKind::ShuttingDown => "shutting_down",
        }
    }

    /// True for refusals made by policy or limits (4xx), false for failures (5xx).
    pub const fn is_policy(self) -> bool {
        self.status() < 500
    }

    /// The audit decision: `deny` for 4xx and for the connection and descriptor caps,
    /// `error` otherwise.
    pub const fn decision(self) -> Decision {
        if self.is_policy()
            || matches!(
                self,
                RefusalKind::TooManyConnections | RefusalKind::OutOfDescriptors
            )
        {
            Decision::Deny
        } else {
            Decision::Error
        }
    }

    const fn status_text(self) -> &'static str {
        match self.status() {
            400 => "Bad Request",
            403 => "Forbidden",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            413 => "Content Too Large",
            431 => "Request Header Fields Too Large",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            _ => "Gateway Timeout",
        }
    }
}

/// A refusal: its kind, the sentence the client reads, and the detail only the audit log
/// gets (the addresses a name resolved to, the resolver's and the dial's own errors), so
/// the proxy is no DNS oracle for internal names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) kind: RefusalKind,
    pub(crate) message: String,
    pub(crate) detail: Option<String>,
}

impl Refusal {
    pub(crate) fn new(kind: RefusalKind, message: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            message: message.into(),
            detail: None,
        }
    }

    /// The same refusal, with a detail for the audit log only.
    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> Refusal {
        self.detail = Some(detail.into());
        self
    }

    /// What the audit log records: the detail when there is one.
    pub(crate) fn audit_message(&self) -> &str {
        self.detail.as_deref().unwrap_or(&self.message)
    }

    /// The body the client reads: status, code, message, and whether retrying can help.
    pub(crate) fn body(&self) -> String {
        let kind = self.kind;
        let what = if kind.is_policy() {
            "This is a policy decision of the agentguard egress proxy; retrying or rephrasing the request will not change it."
        } else {
            "The agentguard egress proxy could not reach the upstream; this is not a policy decision."
        };
        format!(
            "{} {}: {}\n{what}\n",
            kind.status(),
            kind.code(),
            self.message.replace(['\r', '\n'], " ")
        )
    }

    /// The `X-AgentGuard-Decision` value: `policy` or `upstream-error`.
    pub(crate) fn decision_word(&self) -> &'static str {
        if self.kind.is_policy() {
            "policy"
        } else {
            "upstream-error"
        }
    }

    /// The full HTTP response.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let kind = self.kind;
        let body = self.body();
        let allow = if kind == RefusalKind::MethodNotAllowed {
            "Allow: CONNECT\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 {} {}\r\n{allow}X-AgentGuard-Reason: {}\r\nX-AgentGuard-Decision: {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            kind.status(),
            kind.status_text(),
            kind.code(),
            self.decision_word(),
            body.len(),
        )
        .into_bytes()
    }
}

/// Writes the refusal and closes the connection, first reading (and discarding) what the
/// client still sends for a moment, so that closing with unread data does not reset the
/// connection before the client has read the answer.
pub(crate) async fn refuse<S>(mut stream: S, refusal: &Refusal)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if stream.write_all(&refusal.to_bytes()).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    // Out of descriptors, the descriptor is wanted back at once, and a stopping proxy should
    // not wait on its clients: drain only what is there.
    let linger = if matches!(
        refusal.kind,
        RefusalKind::OutOfDescriptors | RefusalKind::ShuttingDown
    ) {
        Duration::from_millis(20)
    } else {
        Duration::from_secs(1)
    };
    let mut sink = [0u8; 4096];
    let mut drained = 0usize;
    let linger_for = linger;
    let drain = async {
        while drained < 64 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = tokio::time::timeout(linger_for, drain).await;
}

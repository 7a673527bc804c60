//! The DNS-pinned HTTPS fetcher (the seed's `NetworkExecutor`).
//!
//! One `get` does, in order: parse the URL once; check the port and the host against the
//! allowlist (a refused name costs zero DNS queries); resolve once and check every answer;
//! dial only the checked addresses; TLS with SNI and certificate verification for the host
//! name; one HTTP/1.1 GET; refuse redirects; cap the body. It never reads `HTTP_PROXY`,
//! `HTTPS_PROXY`, `ALL_PROXY` or `NO_PROXY`: nothing in this crate reads the environment.
//! Every outcome is recorded through the audit sink before it is returned.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{AuditSink, Decision, Event, error_chain};
use agentguard_policy::TargetPolicy;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;

use crate::connect::{Connected, PinnedTls};
use crate::error::{FetchError, Result};
use crate::pin::DEFAULT_MAX_ANSWERS;
use crate::resolve::{DnsResolver, Resolve};
use crate::url::HttpsUrl;

/// The default body limit: 64 KiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024;

/// A successful response.
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status (never a 3xx: those are refused).
    pub status: u16,
    /// The headers, in order, values as text (lossy for non-UTF-8).
    pub headers: Vec<(String, String)>,
    /// The body, at most the configured limit.
    pub body: Bytes,
    /// The address the request was sent to.
    pub dialed: SocketAddr,
    /// The canonical URL that was checked and requested.
    pub url: String,
    /// The allowlist pattern that permitted the host.
    pub rule: String,
}

/// Builder for [`Fetcher`].
pub struct FetcherBuilder {
    policy: Option<TargetPolicy>,
    resolver: Option<Arc<dyn Resolve>>,
    extra_roots_pem: Option<Vec<u8>>,
    bundled_roots: bool,
    max_bytes: u64,
    max_answers: usize,
    connect_timeout: Duration,
    tls_timeout: Duration,
    total_timeout: Duration,
    audit: Option<Arc<dyn AuditSink>>,
}

impl FetcherBuilder {
    /// The hosts, ports and address rule to enforce (required: there is no default
    /// allowlist, and an empty one never means "allow everything").
    pub fn policy(mut self, policy: TargetPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The resolver (default: the system configuration).
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Extra trust roots, PEM (for an internal CA, and for tests).
    pub fn extra_roots_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.extra_roots_pem = Some(pem.into());
        self
    }

    /// Whether to trust the bundled Mozilla roots (default: yes).
    pub fn bundled_roots(mut self, yes: bool) -> Self {
        self.bundled_roots = yes;
        self
    }

    /// The largest body accepted (default 64 KiB); a larger one is an error.
    pub fn max_bytes(mut self, max: u64) -> Self {
        self.max_bytes = max;
        self
    }

    /// The most answers considered for one name (default 32); more refuses the name.
    pub fn max_answers(mut self, max: usize) -> Self {
        self.max_answers = max;
        self
    }

    /// Timeout of the dial across every checked address together (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// TLS handshake timeout (default 10 s).
    pub fn tls_timeout(mut self, timeout: Duration) -> Self {
        self.tls_timeout = timeout;
        self
    }

    /// Timeout for the whole fetch (default 30 s).
    pub fn total_timeout(mut self, timeout: Duration) -> Self {
        self.total_timeout = timeout;
        self
    }

    /// Where every decision is recorded.
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// Validates everything and builds the fetcher.
    pub fn build(self) -> Result<Fetcher> {
        let policy = self
            .policy
            .ok_or(agentguard_policy::Error::EmptyHostAllowlist)?;
        let mut tls = PinnedTls::new(self.bundled_roots, self.extra_roots_pem.as_deref())?;
        tls.max_answers = self.max_answers;
        tls.connect_timeout = self.connect_timeout;
        tls.tls_timeout = self.tls_timeout;
        let resolver = match self.resolver {
            Some(r) => r,
            None => Arc::new(DnsResolver::system()?),
        };
        Ok(Fetcher {
            policy,
            resolver,
            tls,
            max_bytes: self.max_bytes,
            total_timeout: self.total_timeout,
            audit: self.audit,
        })
    }
}

/// Fetches https URLs with DNS pinning.
pub struct Fetcher {
    policy: TargetPolicy,
    resolver: Arc<dyn Resolve>,
    tls: PinnedTls,
    max_bytes: u64,
    total_timeout: Duration,
    audit: Option<Arc<dyn AuditSink>>,
}

impl Fetcher {
    /// A builder with the defaults: the system resolver, the bundled roots, 64 KiB bodies,
    /// 10 s connect and TLS timeouts, 30 s in total. The policy must be given.
    pub fn builder() -> FetcherBuilder {
        FetcherBuilder {
            policy: None,
            resolver: None,
            extra_roots_pem: None,
            bundled_roots: true,
            max_bytes: DEFAULT_MAX_BYTES,
            max_answers: DEFAULT_MAX_ANSWERS,
            connect_timeout: Duration::from_secs(10),
            tls_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(30),
            audit: None,
        }
    }

    /// GETs `url`; records the outcome in the audit sink before returning it.
    pub async fn get(&self, url: &str) -> std::result::Result<Response, FetchError> {
        let parsed = HttpsUrl::parse(url).map_err(FetchError::InvalidUrl);
        let subject = match &parsed {
            Ok(u) => u.to_string(),
            Err(_) => url.chars().take(2048).collect(),
        };
        let outcome = match parsed {
            Ok(parsed) => match tokio::time::timeout(self.total_timeout, self.fetch(&parsed)).await
            {
                Ok(result) => result,
                Err(_) => Err(FetchError::Timeout {
                    stage: "fetch",
                    limit: self.total_timeout,
                }),
            },
            Err(e) => Err(e),
        };
        if let Some(sink) = &self.audit {
            let event = match &outcome {
                Ok(r) => Event::fetch(Decision::Allow, "ok", &subject)
                    .data("status", r.status)
                    .data("rule", r.rule.as_str())
                    .data("dialed", r.dialed.to_string())
                    .data("bytes", r.body.len() as u64),
                Err(e) => {
                    let decision = if e.is_refusal() {
                        Decision::Deny
                    } else {
                        Decision::Error
                    };
                    Event::fetch(decision, e.reason(), &subject).data("message", error_chain(e))
                }
            };
            sink.record(event)?;
        }
        outcome
    }

    async fn fetch(&self, url: &HttpsUrl) -> std::result::Result<Response, FetchError> {
        let Connected {
            stream: tls,
            dialed,
            rule,
        } = self
            .tls
            .connect(&self.policy, self.resolver.as_ref(), &url.host, url.port)
            .await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| FetchError::Http(Box::new(e)))?;
        let driver = tokio::spawn(connection);
        let request = http::Request::builder()
            .method(http::Method::GET)
            .uri(url.path_and_query.as_str())
            .header(http::header::HOST, url.authority())
            .header(
                http::header::USER_AGENT,
                concat!("agentguard/", env!("CARGO_PKG_VERSION")),
            )
            .header(http::header::ACCEPT_ENCODING, "identity")
            .header(http::header::CONNECTION, "close")
            .body(Empty::<Bytes>::new())
            .map_err(|e| FetchError::Http(Box::new(e)))?;
        let result = self
            .exchange(&mut sender, request, url, dialed)
            .await
            .map(|response| Response { rule, ..response });
        driver.abort();
        result
    }

    async fn exchange(
        &self,
        sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
        request: http::Request<Empty<Bytes>>,
        url: &HttpsUrl,
        dialed: SocketAddr,
    ) -> std::result::Result<Response, FetchError> {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| FetchError::Http(Box::new(e)))?;
        let status = response.status().as_u16();
        if response.status().is_redirection() {
            let location = response
                .headers()
                .get(http::header::LOCATION)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            return Err(FetchError::Redirect { status, location });
        }
        let declared = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_bytes) {
            return Err(FetchError::BodyTooLarge {
                limit: self.max_bytes,
            });
        }
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let limit = usize::try_from(self.max_bytes).unwrap_or(usize::MAX);
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    FetchError::BodyTooLarge {
                        limit: self.max_bytes,
                    }
                } else {
                    FetchError::Http(e)
                }
            })?
            .to_bytes();
        Ok(Response {
            status,
            headers,
            body,
            dialed,
            url: url.to_string(),
            rule: String::new(),
        })
    }
}

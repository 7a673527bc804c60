//! A credential route (DESIGN.md, "Credentials that never enter the sandbox"): a named
//! plain-HTTP endpoint on the run's proxy for which the proxy itself is the TLS client of one
//! https upstream, adding a header that holds a secret the container never sees.
//!
//! [`Route::builder`] checks everything once: the name (one URL path segment), the upstream
//! (https, a host name, no query), the secret (not empty, no control character: it goes into
//! a header), the header (not one the proxy owns), the methods and the path prefixes. The
//! route's own target policy allows exactly the upstream's host and port, with the operator's
//! extra ranges; its TLS client trusts the bundled roots and any extra CA given.

use std::fmt;

use agentguard_netpin::{HttpsUrl, PinnedTls};
use agentguard_policy::{Host, IpNet, TargetPolicy};
use base64::Engine as _;
use http::{HeaderName, HeaderValue, Method};

use crate::error::{Error, Result};
use crate::redact::{Pattern, base64_forms, secret_patterns};
use crate::route_rules::{methods, paths};

/// The default request body cap: 10 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 10 * 1024 * 1024;

/// A secret value: never printed, never in a message, never in an event.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

impl Secret {
    /// The value (leading and trailing whitespace removed), refused when it is empty or holds
    /// a control character or a non-ASCII character. Errors never contain the value.
    pub fn new(value: &str) -> std::result::Result<Secret, &'static str> {
        let value = value.trim();
        if value.is_empty() {
            return Err("it is empty");
        }
        if !value.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return Err(
                "it holds a control or non-ASCII character, which a header value cannot carry",
            );
        }
        Ok(Secret(value.as_bytes().into()))
    }

    fn expose(&self) -> &str {
        // Checked ASCII in `new`.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// How the secret is sent upstream.
#[derive(Debug, Clone)]
pub enum Credential {
    /// `header: template`, `{secret}` in the template replaced by the secret.
    Header {
        /// The header's name.
        name: String,
        /// The value, with `{secret}` where the secret goes.
        template: String,
    },
    /// `Authorization: Basic base64(user:secret)`.
    Basic {
        /// The user name.
        user: String,
    },
}

/// A checked route.
pub struct Route {
    pub(crate) name: String,
    pub(crate) upstream: HttpsUrl,
    /// The upstream's path without a trailing `/` (empty for the root).
    pub(crate) base_path: String,
    pub(crate) policy: TargetPolicy,
    pub(crate) tls: PinnedTls,
    pub(crate) header: HeaderName,
    pub(crate) value: HeaderValue,
    pub(crate) methods: Vec<Method>,
    pub(crate) paths: Vec<String>,
    /// What is replaced by `[REDACTED]` in responses: the secret, its base64 forms, the
    /// rendered header value, and the encoded credential of basic auth (`redact.rs`).
    pub(crate) redact: Vec<Pattern>,
    pub(crate) max_request_bytes: u64,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("name", &self.name)
            .field("upstream", &self.upstream.to_string())
            .field("header", &self.header)
            .field("methods", &self.methods)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl Route {
    /// A builder for the route `name` to `upstream` (an https URL) carrying `secret`.
    pub fn builder(name: &str, upstream: &str, secret: Secret) -> RouteBuilder {
        RouteBuilder {
            name: name.to_owned(),
            upstream: upstream.to_owned(),
            secret,
            credential: None,
            methods: Vec::new(),
            paths: Vec::new(),
            cidrs: Vec::new(),
            ca_pem: None,
            bundled_roots: true,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }

    /// The route's name: the first path segment of its URL inside the container.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The upstream base URL (canonical).
    pub fn upstream(&self) -> String {
        self.upstream.to_string()
    }

    /// The upstream's host.
    pub fn host(&self) -> String {
        self.upstream.host.to_string()
    }

    /// The ranges this route opens for its upstream though not public (`allow_cidrs`).
    pub fn allowed_cidrs(&self) -> &[IpNet] {
        self.policy.addresses.allowed_cidrs()
    }

    /// The methods allowed.
    pub fn methods(&self) -> Vec<&str> {
        self.methods.iter().map(Method::as_str).collect()
    }

    /// The allowed path prefixes, relative to the upstream.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }

    /// The header the proxy sets (never its value).
    pub fn header(&self) -> &str {
        self.header.as_str()
    }

    /// One line for agents and operators: `GET, HEAD https://host/base paths /a/, /b/`.
    pub fn describe(&self) -> String {
        format!(
            "{} {} paths {}",
            self.methods().join(", "),
            self.upstream(),
            self.paths.join(", ")
        )
    }
}

/// Builder for [`Route`].
pub struct RouteBuilder {
    name: String,
    upstream: String,
    secret: Secret,
    credential: Option<Credential>,
    methods: Vec<String>,
    paths: Vec<String>,
    cidrs: Vec<IpNet>,
    ca_pem: Option<Vec<u8>>,
    bundled_roots: bool,
    max_request_bytes: u64,
}

/// Headers the proxy owns or that must never be set by configuration.
const OWN_HEADERS: &[&str] = &[
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
    "proxy-connection",
    "accept-encoding",
    "expect",
];

impl RouteBuilder {
    /// How the secret is sent (required).
    pub fn credential(mut self, credential: Credential) -> Self {
        self.credential = Some(credential);
        self
    }

    /// An allowed method (default GET and HEAD).
    pub fn method(mut self, method: &str) -> Self {
        self.methods.push(method.to_owned());
        self
    }

    /// An allowed path prefix, relative to the upstream (default `/`).
    pub fn path(mut self, prefix: &str) -> Self {
        self.paths.push(prefix.to_owned());
        self
    }

    /// A range treated as reachable although not public (for internal upstreams, tests).
    pub fn allow_cidr(mut self, net: IpNet) -> Self {
        self.cidrs.push(net);
        self
    }

    /// Extra trusted roots, PEM.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Whether the bundled Mozilla roots are trusted (default: yes).
    pub fn bundled_roots(mut self, yes: bool) -> Self {
        self.bundled_roots = yes;
        self
    }

    /// The largest request body forwarded (default 10 MiB); a larger one is answered 413.
    pub fn max_request_bytes(mut self, max: u64) -> Self {
        self.max_request_bytes = max;
        self
    }

    /// Checks everything; errors name the route and what to write instead.
    pub fn build(self) -> Result<Route> {
        let name = self.name.clone();
        let fail = |message: String| Error::Route {
            route: name.clone(),
            message,
        };
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(fail(
                "a route name is 1 to 64 letters, digits, `-` or `_` (it is a URL path segment)"
                    .into(),
            ));
        }
        let upstream = HttpsUrl::parse(&self.upstream)
            .map_err(|e| fail(format!("upstream {:?}: {e}", self.upstream)))?;
        if matches!(upstream.host, Host::Ip(_)) {
            return Err(fail(format!(
                "upstream {:?} names an IP address; name the host, which is pinned and checked",
                self.upstream
            )));
        }
        if upstream.path_and_query.contains('?') {
            return Err(fail(format!(
                "upstream {:?} has a query; give the base URL only",
                self.upstream
            )));
        }
        let base_path = upstream.path_and_query.trim_end_matches('/').to_owned();
        let mut policy = TargetPolicy::builder()
            .allow(upstream.host.to_string())
            .allow_port(upstream.port);
        for net in &self.cidrs {
            policy = policy.allow_cidr(*net);
        }
        let policy = policy.build()?;
        let tls = PinnedTls::new(self.bundled_roots, self.ca_pem.as_deref())?;
        let credential = self.credential.clone().ok_or_else(|| {
            fail("give `header` and `value`, or `scheme = \"basic\"` and `user`".into())
        })?;
        let (header, value, redact) = render(&credential, &self.secret).map_err(fail)?;
        let methods = methods(&self.methods).map_err(fail)?;
        let paths = paths(&self.paths).map_err(fail)?;
        Ok(Route {
            name: self.name,
            upstream,
            base_path,
            policy,
            tls,
            header,
            value,
            methods,
            paths,
            redact,
            max_request_bytes: self.max_request_bytes,
        })
    }
}

/// The header, its value (marked sensitive) and the patterns to redact: the secret, the base64
/// of the secret alone, and the rendered value (for basic, the base64 of `user:secret`), each
/// in every encoded form `redact.rs` matches.
fn render(
    credential: &Credential,
    secret: &Secret,
) -> std::result::Result<(HeaderName, HeaderValue, Vec<Pattern>), String> {
    let mut redact = secret_patterns(&secret.0);
    let (name, text) = match credential {
        Credential::Header { name, template } => {
            if template.matches("{secret}").count() != 1 {
                return Err(format!(
                    "value {template:?} must hold `{{secret}}` exactly once, where the secret goes"
                ));
            }
            let rendered = template.replace("{secret}", secret.expose());
            let prefix = template.find("{secret}").unwrap_or(0);
            if prefix > 0 {
                redact.push(Pattern::after(rendered.clone().into_bytes(), prefix));
            }
            (name.as_str(), rendered)
        }
        Credential::Basic { user } => {
            if user.contains(':') || user.chars().any(char::is_control) {
                return Err(format!(
                    "user {user:?} may not hold `:` or a control character"
                ));
            }
            let credential = format!("{user}:{}", secret.expose());
            // The base64 characters that encode only `user:` say nothing of the secret.
            let user_only = (user.len() + 1) / 3 * 4;
            redact
                .extend(base64_forms(credential.as_bytes()).map(|b| Pattern::after(b, user_only)));
            let encoded = base64::engine::general_purpose::STANDARD.encode(credential);
            ("authorization", format!("Basic {encoded}"))
        }
    };
    let header =
        HeaderName::try_from(name).map_err(|_| format!("{name:?} is not a header name"))?;
    if OWN_HEADERS.contains(&header.as_str()) {
        return Err(format!(
            "header {name:?} is set by the proxy itself; name the header that carries the credential (for example Authorization)"
        ));
    }
    let mut value = HeaderValue::try_from(text)
        .map_err(|_| "the rendered value is not a valid header value".to_owned())?;
    value.set_sensitive(true);
    Ok((header, value, redact))
}

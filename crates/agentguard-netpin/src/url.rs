//! The one URL parser used both for the policy check and for the request.
//!
//! It accepts `https://HOST[:PORT][/PATH][?QUERY][#FRAGMENT]` and nothing looser: no other
//! scheme, no userinfo (`user@`), no backslashes (which WHATWG parsers read as `/`), no
//! whitespace or control characters, no raw non-ASCII in the path. The host goes through the
//! policy's canonical host form, so `https://0x7f.1/` is the IP literal 127.0.0.1, exactly
//! as a browser would read it. The fragment is dropped: it is never sent.

use std::fmt;

use agentguard_policy::{Authority, DEFAULT_PORT, Host};

/// A parsed https URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpsUrl {
    /// The host, canonical.
    pub host: Host,
    /// The port (443 when not given).
    pub port: u16,
    /// The path and query to request, starting with `/`.
    pub path_and_query: String,
}

/// Why a URL was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// The URL breaks a rule of this parser (scheme, userinfo, characters, ...).
    #[error("{0}")]
    Syntax(String),
    /// The host or port is not valid.
    #[error(transparent)]
    Authority(#[from] agentguard_policy::Error),
}

impl HttpsUrl {
    /// Parses `input`, or says what is wrong with it.
    pub fn parse(input: &str) -> Result<HttpsUrl, UrlError> {
        let syntax = |m: String| Err(UrlError::Syntax(m));
        if let Some(c) = input.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return syntax(format!(
                "character {c:?} is not allowed in a URL; percent-encode it"
            ));
        }
        if input.contains('\\') {
            return syntax("a backslash is not allowed in a URL (parsers disagree on it)".into());
        }
        let Some((scheme, rest)) = input.split_once("://") else {
            return syntax(format!(
                "{:?} is not an absolute URL; expected https://HOST/PATH",
                input.chars().take(256).collect::<String>()
            ));
        };
        if !scheme.eq_ignore_ascii_case("https") {
            return syntax(format!(
                "scheme {scheme:?} is not allowed; only https is fetched"
            ));
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return syntax(
                "userinfo (`user@` or `user:password@`) is not allowed in the URL".into(),
            );
        }
        if authority.is_empty() {
            return syntax("the URL has no host".into());
        }
        let Authority { host, port } = Authority::parse(authority, Some(DEFAULT_PORT))?;
        let without_fragment = tail.split('#').next().unwrap_or_default();
        if let Some(c) = without_fragment.chars().find(|c| !c.is_ascii_graphic()) {
            return syntax(format!(
                "character {c:?} in the path must be percent-encoded"
            ));
        }
        let path_and_query = if without_fragment.starts_with('/') {
            without_fragment.to_owned()
        } else {
            format!("/{without_fragment}")
        };
        Ok(HttpsUrl {
            host,
            port,
            path_and_query,
        })
    }

    /// The `Host` header value: the canonical host, with the port when it is not 443.
    pub fn authority(&self) -> String {
        if self.port == DEFAULT_PORT {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for HttpsUrl {
    /// The canonical URL: what is checked, requested and recorded.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "https://{}{}", self.authority(), self.path_and_query)
    }
}

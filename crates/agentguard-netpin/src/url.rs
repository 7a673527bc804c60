//! The one URL parser used both for the policy check and for the request.
//!
//! It accepts `https://HOST[:PORT][/PATH][?QUERY][#FRAGMENT]` and nothing looser: no other
//! scheme, no userinfo (`user@`), no backslashes (which WHATWG parsers read as `/`), no
//! whitespace or control characters, no raw non-ASCII in the path. The host goes through the
//! policy's canonical host form, so `https://0x7f.1/` is the IP literal 127.0.0.1, exactly
//! as a browser would read it. The fragment is dropped: it is never sent.

use std::fmt;

use agentguard_policy::Host;

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

impl HttpsUrl {
    /// Parses `input`, or says what is wrong with it.
    pub fn parse(input: &str) -> Result<HttpsUrl, String> {
        if let Some(c) = input.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "character {c:?} is not allowed in a URL; percent-encode it"
            ));
        }
        if input.contains('\\') {
            return Err("a backslash is not allowed in a URL (parsers disagree on it)".into());
        }
        let (scheme, rest) = input.split_once("://").ok_or_else(|| {
            format!("{input:?} is not an absolute URL; expected https://HOST/PATH")
        })?;
        if !scheme.eq_ignore_ascii_case("https") {
            return Err(format!(
                "scheme {scheme:?} is not allowed; only https is fetched"
            ));
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return Err("userinfo (`user@` or `user:password@`) is not allowed in the URL".into());
        }
        if authority.is_empty() {
            return Err("the URL has no host".into());
        }
        let (host_text, port_text) = if let Some(after) = authority.strip_prefix('[') {
            let close = after
                .find(']')
                .ok_or("an IPv6 literal is missing its `]`")?;
            let port = &after[close + 1..];
            let port = match port.strip_prefix(':') {
                Some(p) => Some(p),
                None if port.is_empty() => None,
                None => return Err(format!("unexpected {port:?} after the IPv6 literal")),
            };
            (&authority[..close + 2], port)
        } else {
            match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port = match port_text {
            None => 443,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                match p.parse::<u16>() {
                    Ok(port) if port > 0 => port,
                    _ => return Err(format!("port {p:?} is out of range 1-65535")),
                }
            }
            Some(p) => return Err(format!("port {p:?} is not a number")),
        };
        let host = Host::parse(host_text).map_err(|e| e.to_string())?;
        let without_fragment = tail.split('#').next().unwrap_or_default();
        if let Some(c) = without_fragment.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(format!(
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
        if self.port == 443 {
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

//! Parsing of the request head and the CONNECT target: strict, and done once.
//!
//! The target is parsed into the policy's canonical [`Host`] and a port here, and that one
//! value is used for matching, dialing and logging, so no second parser can read the target
//! differently. Anything unusual is malformed: a missing or out-of-range port, userinfo,
//! NUL, whitespace, obsolete header folding, a version other than HTTP/1.0 or 1.1.

use agentguard_policy::Host;

/// The most header lines accepted.
const MAX_HEADERS: usize = 100;

/// The request line of a parsed head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestLine<'a> {
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
}

/// The length of the head including its final blank line, if `buf` holds a whole head.
/// `from` is where the previous search stopped, so repeated calls stay linear.
pub(crate) fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = from.saturating_sub(3);
    buf.get(start..)?
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| start + i + 4)
}

/// Parses a whole head (ending in CRLF CRLF): the request line, and every header line
/// checked for shape.
pub(crate) fn parse_head(head: &[u8]) -> Result<RequestLine<'_>, String> {
    let text =
        std::str::from_utf8(head).map_err(|_| "the request head is not valid UTF-8".to_owned())?;
    let body = text
        .strip_suffix("\r\n\r\n")
        .ok_or("the request head does not end with a blank line")?;
    let mut lines = body.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!(
            "malformed request line {request_line:?}; expected `CONNECT host:port HTTP/1.1`"
        ));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("malformed method {method:?}"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(format!("unsupported version {version:?}; use HTTP/1.1"));
    }
    let mut count = 0;
    for line in lines {
        count += 1;
        if count > MAX_HEADERS {
            return Err(format!("more than {MAX_HEADERS} header lines"));
        }
        if line.starts_with([' ', '\t']) {
            return Err("obsolete header line folding is not accepted".into());
        }
        let (name, _) = line
            .split_once(':')
            .ok_or_else(|| format!("malformed header line {line:?}"))?;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        {
            return Err(format!("malformed header name {name:?}"));
        }
        if line.bytes().any(|b| b == 0 || (b < 0x20 && b != b'\t')) {
            return Err("a control character in a header line".into());
        }
    }
    Ok(RequestLine { method, target })
}

/// Parses a CONNECT target in authority form: `host:port` or `[v6]:port`.
pub(crate) fn parse_authority(target: &str) -> Result<(Host, u16), String> {
    if target.contains('@') {
        return Err("userinfo is not allowed in a CONNECT target".into());
    }
    if let Some(c) = target.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("character {c:?} in the CONNECT target"));
    }
    let (host, port) = if target.starts_with('[') {
        let close = target
            .find(']')
            .ok_or("an IPv6 literal is missing its `]`")?;
        let port = target[close + 1..]
            .strip_prefix(':')
            .ok_or("the CONNECT target has no port; use host:port")?;
        (&target[..=close], port)
    } else {
        let (host, port) = target
            .rsplit_once(':')
            .ok_or("the CONNECT target has no port; use host:port")?;
        if host.contains(':') {
            return Err("an IPv6 literal must be in brackets: [addr]:port".into());
        }
        (host, port)
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port {port:?} is not a number"));
    }
    let port = match port.parse::<u16>() {
        Ok(p) if p > 0 => p,
        _ => return Err(format!("port {port} is out of range 1-65535")),
    };
    let host = Host::parse(host).map_err(|e| e.to_string())?;
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_found_incrementally() {
        let buf = b"CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\nrest";
        assert_eq!(head_end(buf, 0), Some(buf.len() - 4));
        assert_eq!(
            head_end(buf, 30),
            Some(buf.len() - 4),
            "a terminator split across reads"
        );
        assert_eq!(head_end(b"CONNECT a:1 HTTP/1.1\r\n", 0), None);
    }

    #[test]
    fn request_lines() {
        let ok =
            |s: &str| parse_head(s.as_bytes()).map(|r| (r.method.to_owned(), r.target.to_owned()));
        assert_eq!(
            ok("CONNECT pkgs.example.test:443 HTTP/1.1\r\nHost: pkgs.example.test:443\r\n\r\n"),
            Ok(("CONNECT".into(), "pkgs.example.test:443".into()))
        );
        assert_eq!(
            ok("GET http://x/ HTTP/1.1\r\n\r\n"),
            Ok(("GET".into(), "http://x/".into()))
        );
        for bad in [
            "CONNECT  pkgs.example.test:443 HTTP/1.1\r\n\r\n",
            "CONNECT pkgs.example.test:443\r\n\r\n",
            "CONNECT pkgs.example.test:443 HTTP/2\r\n\r\n",
            "connect pkgs.example.test:443 HTTP/1.1\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\nHost a\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\nBad Name: a\r\n\r\n",
            "CONNECT a:1 HTTP/1.1\r\nX: a\u{0}b\r\n\r\n",
        ] {
            assert!(ok(bad).is_err(), "{bad:?}");
        }
        let many = format!("CONNECT a:1 HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(101));
        assert!(ok(&many).unwrap_err().contains("more than 100"));
    }

    #[test]
    fn connect_targets() {
        let ok = |s: &str| parse_authority(s).map(|(h, p)| format!("{h} {p}"));
        assert_eq!(
            ok("PKGS.Example.Test.:443"),
            Ok("pkgs.example.test 443".into())
        );
        assert_eq!(ok("[::1]:8443"), Ok("[::1] 8443".into()));
        assert_eq!(ok("127.1:443"), Ok("127.0.0.1 443".into()));
        for (bad, needle) in [
            ("pkgs.example.test", "no port"),
            ("pkgs.example.test:", "not a number"),
            ("pkgs.example.test:0", "out of range"),
            ("pkgs.example.test:65536", "out of range"),
            ("pkgs.example.test:443x", "not a number"),
            ("user@pkgs.example.test:443", "userinfo"),
            ("pkgs.example.test\u{0}:443", "'\\0'"),
            ("pkgs example.test:443", "' '"),
            ("[::1]", "no port"),
            ("::1:443", "in brackets"),
            ("pkgs%2eexample.test:443", "'%'"),
        ] {
            let err = ok(bad).unwrap_err();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }
}

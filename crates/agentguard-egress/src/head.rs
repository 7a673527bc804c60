//! Parsing of the request head and the CONNECT target: strict, and done once.
//!
//! The target itself is parsed by the policy's `Authority::parse` into the canonical host and
//! a port, and that one value is used for matching, dialing and logging, so no second parser
//! can read the target differently. Anything unusual in the head is malformed: obsolete header
//! folding, control characters, a version other than HTTP/1.0 or 1.1.

/// The most header lines accepted.
const MAX_HEADERS: usize = 100;

/// The request line of a parsed head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLine<'a> {
    /// The method (`CONNECT`).
    pub method: &'a str,
    /// The request target (`host:port` for CONNECT).
    pub target: &'a str,
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
pub fn parse_head(head: &[u8]) -> Result<RequestLine<'_>, String> {
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
}

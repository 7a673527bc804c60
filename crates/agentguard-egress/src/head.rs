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

/// Checks what a route request's head must hold beyond [`parse_head`] before hyper reads it,
/// so that every head hyper would refuse with its own bare 400 is refused by the proxy with
/// its reason headers instead, and no body framing is ambiguous: the target is a URI the
/// `http` crate accepts (hyper's own check: no TAB, `"`, `<`, `>`, `{`, `}`, `|`), no DEL in
/// a header line, at most one `Content-Length` of plain digits, a `Transfer-Encoding` only
/// as exactly `chunked` on HTTP/1.1, and never both.
pub fn check_route_head(head: &[u8]) -> Result<(), String> {
    let line = parse_head(head)?;
    // The characters RFC 3986 requires percent-encoded anywhere in a URI (a backslash is
    // left to the path rules, which name it), then hyper's own parser.
    let unsafe_char = |c: char| c.is_ascii_control() || " \"<>{}|^`".contains(c);
    let uri = (!line.target.contains(unsafe_char))
        .then(|| http::Uri::try_from(line.target).ok())
        .flatten();
    uri.ok_or_else(|| {
        format!(
            "request target {:?} is not a valid URI (spaces, tabs and `\"<>{{}}|` must be percent-encoded)",
            line.target.chars().take(80).collect::<String>()
        )
    })?;
    let text = std::str::from_utf8(head).unwrap_or_default();
    let http10 = text
        .split("\r\n")
        .next()
        .is_some_and(|l| l.ends_with("HTTP/1.0"));
    let mut lengths = 0;
    let mut codings = 0;
    for header in text.split("\r\n").skip(1).filter(|l| !l.is_empty()) {
        if header.contains('\x7f') {
            return Err("a DEL character in a header line".into());
        }
        let (name, value) = header.split_once(':').unwrap_or((header, ""));
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            if lengths > 1 {
                return Err("more than one Content-Length header".into());
            }
            if value.is_empty() || value.len() > 19 || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "Content-Length {:?} is not a plain decimal number",
                    value.chars().take(40).collect::<String>()
                ));
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            codings += 1;
            if codings > 1 || !value.eq_ignore_ascii_case("chunked") || http10 {
                return Err(format!(
                    "Transfer-Encoding {:?}: a request body may only be sent with exactly `chunked`, once, on HTTP/1.1",
                    value.chars().take(40).collect::<String>()
                ));
            }
        }
    }
    if lengths > 0 && codings > 0 {
        return Err("both Content-Length and Transfer-Encoding were sent".into());
    }
    Ok(())
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
    fn route_heads_hyper_would_refuse_are_refused_first() {
        let check = |s: &str| check_route_head(s.as_bytes());
        for good in [
            "GET /api/x?q=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nContent-Length: 12\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n",
            "GET http://127.0.0.1:3128/api/x HTTP/1.0\r\n\r\n",
        ] {
            assert_eq!(check(good), Ok(()), "{good:?}");
        }
        for bad in [
            "GET /api/a\tb HTTP/1.1\r\n\r\n",
            "GET /api/\"x HTTP/1.1\r\n\r\n",
            "GET /api/<x> HTTP/1.1\r\n\r\n",
            "GET /api/{x} HTTP/1.1\r\n\r\n",
            "GET /api/a|b HTTP/1.1\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST /api/x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /api/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
            "GET /api/x HTTP/1.1\r\nX: a\u{7f}\r\n\r\n",
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
    }
}

//! The request target of a route request, parsed once: which route, the path after it (as
//! sent, and decoded for the prefix check), and the query. Pure, so it is fuzzed on its own.
//!
//! Accepted: origin-form `/ROUTE/rest?query`, or absolute-form `http://127.0.0.1:PORT/...`
//! (or `localhost`) from a client that sends everything to its HTTP proxy, where PORT is the
//! relay's. Refused in the path: a backslash, an empty segment (`//`), a `.` or `..` segment
//! in any spelling, also with `;parameters` (`..;`, `.;x`, `..%3b`: servlet containers strip
//! a segment's parameters before resolving dot segments, so `/a/..;/admin` is `/admin` to
//! them), an encoded `/`, `\` or `%` (`%2f`, `%5c`, `%25`: a second decoding upstream would
//! see another path), a control character, bytes that are not UTF-8.

use crate::response::{Refusal, RefusalKind};

/// A parsed route request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTarget<'a> {
    /// The route's name (the first path segment).
    pub route: &'a str,
    /// The path after the route's name as sent: empty or starting with `/`.
    pub rest: &'a str,
    /// The decoded path, starting with `/`: what the route's prefixes are matched against.
    pub decoded: String,
    /// The query, without its `?`.
    pub query: Option<&'a str>,
}

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    /// Absolute-form for another host or port: a forward-proxy request, which is refused.
    NotLocal(String),
    /// Not a request target at all.
    Malformed(String),
    /// The path breaks a rule above.
    Path(String),
}

impl TargetError {
    /// The refusal a request for `method` with this target gets.
    pub(crate) fn refusal(self, method: &http::Method) -> Refusal {
        match self {
            TargetError::NotLocal(m) => {
                Refusal::new(RefusalKind::MethodNotAllowed, format!("{method} {m}"))
            }
            TargetError::Malformed(m) => Refusal::new(RefusalKind::MalformedTarget, m),
            TargetError::Path(m) => Refusal::new(RefusalKind::PathNotAllowed, m),
        }
    }
}

/// Parses `target` for a proxy whose relay listens on `port` inside the container.
pub fn parse_route_target(target: &str, port: u16) -> Result<RouteTarget<'_>, TargetError> {
    let origin = match scheme_rest(target) {
        Some(("http", rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            let local = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
            if !local.iter().any(|l| l.eq_ignore_ascii_case(authority)) {
                return Err(TargetError::NotLocal(format!(
                    "{authority:?} is not this proxy's routes (http://127.0.0.1:{port}/ROUTE/); other hosts are reached through CONNECT"
                )));
            }
            if path.is_empty() { "/" } else { path }
        }
        Some(_) => {
            return Err(TargetError::NotLocal(
                "only http:// URLs of this proxy's routes are forwarded; other targets are reached through CONNECT".into(),
            ));
        }
        None => target,
    };
    if !origin.starts_with('/') {
        return Err(TargetError::Malformed(format!(
            "request target {:?} is neither /ROUTE/PATH nor http://127.0.0.1:{port}/ROUTE/PATH",
            cut(target)
        )));
    }
    if origin.contains('#') {
        return Err(TargetError::Malformed(
            "a request target may not hold a fragment (`#`)".into(),
        ));
    }
    let (path, query) = match origin.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (origin, None),
    };
    let after = &path[1..];
    let end = after.find('/').unwrap_or(after.len());
    let (route, rest) = after.split_at(end);
    let decoded = decode_path(rest)?;
    Ok(RouteTarget {
        route,
        rest,
        decoded,
        query,
    })
}

/// The route name and the path of `target` as sent, for the audit record of a request
/// refused before (or while) its target was checked: split leniently, never decoded, each
/// cut to 256 characters (the audit log escapes what it records).
pub(crate) fn as_sent(target: &str) -> (String, String) {
    let cut = |t: &str| t.chars().take(256).collect::<String>();
    let path = match scheme_rest(target) {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let after = path.strip_prefix('/').unwrap_or(path);
    let (route, rest) = after.split_at(after.find('/').unwrap_or(after.len()));
    (
        cut(route),
        if rest.is_empty() {
            "/".into()
        } else {
            cut(rest)
        },
    )
}

/// `(scheme lower-cased, rest)` when `target` is absolute-form.
fn scheme_rest(target: &str) -> Option<(&'static str, &str)> {
    let (scheme, rest) = target.split_once("://")?;
    if scheme.eq_ignore_ascii_case("http") {
        Some(("http", rest))
    } else if scheme
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        Some(("other", rest))
    } else {
        None
    }
}

fn cut(text: &str) -> String {
    text.chars().take(80).collect()
}

/// Checks and decodes the path after the route's name (see the module docs).
fn decode_path(rest: &str) -> Result<String, TargetError> {
    let refuse = |why: &str| Err(TargetError::Path(format!("path {:?}: {why}", cut(rest))));
    if rest.contains('\\') {
        return refuse("a backslash is not accepted");
    }
    if !rest.bytes().all(|b| b.is_ascii_graphic()) {
        return refuse("raw spaces, control and non-ASCII characters must be percent-encoded");
    }
    let mut decoded = Vec::with_capacity(rest.len() + 1);
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            decoded.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
            return refuse("a `%` not followed by two hex digits");
        };
        match byte {
            b'/' | b'\\' | b'%' => {
                return refuse("an encoded `/`, `\\` or `%` is not accepted");
            }
            0..0x20 | 0x7f => return refuse("an encoded control character is not accepted"),
            _ => decoded.push(byte),
        }
        i += 3;
    }
    let Ok(decoded) = String::from_utf8(decoded) else {
        return refuse("the decoded path is not UTF-8");
    };
    if decoded.is_empty() {
        return Ok("/".to_owned());
    }
    let segments: Vec<&str> = decoded.split('/').collect();
    for (n, segment) in segments.iter().enumerate().skip(1) {
        let last = n == segments.len() - 1;
        // What a servlet container resolves: the segment without its `;parameters`.
        let (name, params) = match segment.split_once(';') {
            Some((name, _)) => (name, true),
            None => (*segment, false),
        };
        if name == "." || name == ".." {
            return refuse(
                "a `.` or `..` segment is not accepted, in any encoding, with or without `;parameters`",
            );
        }
        if name.is_empty() && (params || !last) {
            return refuse("an empty segment (`//`, `/;x/`) is not accepted");
        }
    }
    Ok(decoded)
}

/// True when the decoded `path` is inside one of `prefixes`: equal to it, or below it at a
/// segment boundary (`/a/` and `/a` both allow `/a` and `/a/b`, never `/ab`).
pub fn path_allowed(prefixes: &[String], path: &str) -> bool {
    prefixes.iter().any(|prefix| {
        let bare = prefix.trim_end_matches('/');
        bare.is_empty()
            || path == bare
            || path
                .strip_prefix(bare)
                .is_some_and(|after| after.starts_with('/'))
    })
}

/// A `Location` from the upstream, rewritten to the route's URL when it points inside the
/// upstream base (`origin` is `https://host[:port]`, `base` the base path without a trailing
/// `/`); any other value is passed back unchanged.
pub(crate) fn rewrite_location(
    value: &str,
    origin: &str,
    base: &str,
    route_url: &str,
    route_path: &str,
) -> Option<String> {
    let inside = |rest: &str| rest.is_empty() || rest.starts_with(['/', '?']);
    if value.len() >= origin.len() && value[..origin.len()].eq_ignore_ascii_case(origin) {
        let after = &value[origin.len()..];
        let rest = after.strip_prefix(base).filter(|r| inside(r))?;
        return Some(format!("{route_url}{rest}"));
    }
    if value.starts_with('/') && !value.starts_with("//") {
        let rest = value.strip_prefix(base).filter(|r| inside(r))?;
        return Some(format!("{route_path}{rest}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(target: &str) -> (String, String, String, Option<String>) {
        let t = parse_route_target(target, 3128).unwrap();
        (
            t.route.to_owned(),
            t.rest.to_owned(),
            t.decoded,
            t.query.map(str::to_owned),
        )
    }

    #[test]
    fn origin_and_absolute_forms_name_the_route() {
        let want = (
            "gh".to_owned(),
            "/repos/a%20b".to_owned(),
            "/repos/a b".to_owned(),
            Some("x=1".to_owned()),
        );
        assert_eq!(ok("/gh/repos/a%20b?x=1"), want);
        assert_eq!(ok("http://127.0.0.1:3128/gh/repos/a%20b?x=1"), want);
        assert_eq!(ok("HTTP://LOCALHOST:3128/gh/repos/a%20b?x=1"), want);
        assert_eq!(ok("/gh"), ("gh".into(), "".into(), "/".into(), None));
        assert_eq!(ok("/gh/"), ("gh".into(), "/".into(), "/".into(), None));
        for other in [
            "http://127.0.0.1:3129/gh/",
            "http://127.0.0.2:3128/gh/",
            "http://pkgs.example.com/",
            "https://127.0.0.1:3128/gh/",
            "http://127.0.0.1/gh/",
        ] {
            assert!(
                matches!(
                    parse_route_target(other, 3128),
                    Err(TargetError::NotLocal(_))
                ),
                "{other}"
            );
        }
        assert!(matches!(
            parse_route_target("gh/x", 3128),
            Err(TargetError::Malformed(_))
        ));
        assert!(matches!(
            parse_route_target("/gh/x#frag", 3128),
            Err(TargetError::Malformed(_))
        ));
    }

    #[test]
    fn traversal_is_refused_in_every_encoding() {
        for bad in [
            "/gh/a/../b",
            "/gh/..",
            "/gh/a/./b",
            "/gh/%2e%2e/x",
            "/gh/%2E%2E/x",
            "/gh/.%2e/x",
            "/gh/%2e./x",
            "/gh/a%2fb",
            "/gh/a%2Fb",
            "/gh/a%5cb",
            "/gh/a\\b",
            "/gh//etc",
            "/gh/a//b",
            "/gh/%252e%252e/x",
            "/gh/a%00b",
            "/gh/a%0ab",
            "/gh/a%zz",
            "/gh/a%2",
            "/gh/%ff",
            "/gh/a b",
            // Servlet path parameters on dot segments (issue 34, item 3).
            "/gh/repos/acme/widget/..;/..;/..;/admin/users",
            "/gh/repos/acme/widget/.;/x",
            "/gh/repos/acme/widget/..;jsessionid=1/admin",
            "/gh/repos/acme/widget/..%3b/admin",
            "/gh/repos/acme/widget/..%3B/admin",
            "/gh/repos/acme/widget/%2e%2e;x/admin",
            "/gh/repos/;x/admin",
            "/gh/repos/acme/widget/;",
        ] {
            assert!(
                matches!(parse_route_target(bad, 3128), Err(TargetError::Path(_))),
                "{bad}: {:?}",
                parse_route_target(bad, 3128)
            );
        }
        assert_eq!(ok("/gh/a/b/").2, "/a/b/", "a trailing slash is a path");
        assert_eq!(ok("/gh/%C3%A9").2, "/é");
        // Parameters on an ordinary segment stay the upstream's business.
        assert_eq!(ok("/gh/a;v=1/b").2, "/a;v=1/b");
        assert_eq!(ok("/gh/a/...;x").2, "/a/...;x");
    }

    #[test]
    fn refused_targets_are_recorded_as_sent() {
        let sent = |t: &str| as_sent(t);
        assert_eq!(sent("/gh/a/../b?x=1"), ("gh".into(), "/a/../b".into()));
        assert_eq!(sent("/gh"), ("gh".into(), "/".into()));
        assert_eq!(
            sent("http://127.0.0.1:3128/gh/%2e%2e/x"),
            ("gh".into(), "/%2e%2e/x".into())
        );
        assert_eq!(sent("/gh/a\\b"), ("gh".into(), "/a\\b".into()));
        assert_eq!(sent("*"), ("*".into(), "/".into()));
        assert_eq!(sent(&format!("/gh/{}", "x".repeat(1000))).1.len(), 256);
    }

    #[test]
    fn prefixes_match_at_segment_boundaries() {
        let prefixes = vec!["/repos/acme/widget/".to_owned()];
        assert!(path_allowed(&prefixes, "/repos/acme/widget/issues"));
        assert!(path_allowed(&prefixes, "/repos/acme/widget"));
        assert!(!path_allowed(&prefixes, "/repos/acme/widgetx"));
        assert!(!path_allowed(&prefixes, "/repos/acme/"));
        assert!(!path_allowed(&prefixes, "/"));
        assert!(path_allowed(&["/".to_owned()], "/anything/at/all"));
    }

    #[test]
    fn locations_inside_the_base_point_at_the_route() {
        let rewrite = |v: &str| {
            rewrite_location(
                v,
                "https://api.example.com",
                "/v3",
                "http://127.0.0.1:3128/gh",
                "/gh",
            )
        };
        assert_eq!(
            rewrite("https://api.example.com/v3/next?page=2").as_deref(),
            Some("http://127.0.0.1:3128/gh/next?page=2")
        );
        assert_eq!(
            rewrite("HTTPS://API.EXAMPLE.COM/v3").as_deref(),
            Some("http://127.0.0.1:3128/gh")
        );
        assert_eq!(rewrite("/v3/next").as_deref(), Some("/gh/next"));
        assert_eq!(rewrite("https://api.example.com/v3x"), None);
        assert_eq!(rewrite("https://api.example.com:444/v3/next"), None);
        assert_eq!(rewrite("https://elsewhere.example.com/v3/next"), None);
        assert_eq!(rewrite("//api.example.com/v3/next"), None);
        assert_eq!(rewrite("next"), None);
    }
}

//! A route's `methods` and `paths` as written, checked: the methods one of seven (upper
//! case; none means `GET` and `HEAD`), each path a plain absolute prefix (none means every
//! path). `policy suggest` checks a path it would propose with the same rule.

use http::Method;

/// The methods of a route that names none.
pub const DEFAULT_ROUTE_METHODS: [&str; 2] = ["GET", "HEAD"];

/// A route's `methods` as written, checked: each one of the seven, upper case; none means
/// [`DEFAULT_ROUTE_METHODS`]. The error says which method and what is allowed.
pub fn methods(given: &[String]) -> std::result::Result<Vec<Method>, String> {
    if given.is_empty() {
        return Ok(vec![Method::GET, Method::HEAD]);
    }
    let mut out = Vec::new();
    for method in given {
        let parsed = match method.as_str() {
            "GET" => Method::GET,
            "HEAD" => Method::HEAD,
            "POST" => Method::POST,
            "PUT" => Method::PUT,
            "PATCH" => Method::PATCH,
            "DELETE" => Method::DELETE,
            "OPTIONS" => Method::OPTIONS,
            other => {
                return Err(format!(
                    "method {other:?} is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS (upper case)"
                ));
            }
        };
        if !out.contains(&parsed) {
            out.push(parsed);
        }
    }
    Ok(out)
}

/// Checks one `paths` prefix as a route's builder does: a plain absolute path.
pub fn check_path_prefix(prefix: &str) -> std::result::Result<(), String> {
    paths(&[prefix.to_owned()]).map(drop)
}

pub(crate) fn paths(given: &[String]) -> std::result::Result<Vec<String>, String> {
    if given.is_empty() {
        return Ok(vec!["/".to_owned()]);
    }
    for prefix in given {
        let segments_ok = prefix
            .split('/')
            .skip(1)
            .all(|s| s != "." && s != ".." && !s.contains('%'));
        if !prefix.starts_with('/')
            || prefix.contains("//")
            || prefix.contains(['\\', '?', '#'])
            || !prefix.bytes().all(|b| b.is_ascii_graphic())
            || !segments_ok
        {
            return Err(format!(
                "path {prefix:?} must be a plain absolute path such as \"/repos/acme/\" (no `.` or `..` segment, `//`, `%`, `?`, `#` or backslash)"
            ));
        }
    }
    Ok(given.to_vec())
}

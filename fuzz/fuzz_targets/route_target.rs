//! A route request, as the proxy reads it: `parse_head` of the whole head, the head checks
//! before hyper (`check_route_head`), then `parse_route_target` of its target, then the prefix
//! check. Nothing may panic, a head that passes the checks has a plain framing, and an
//! accepted target keeps every path rule: the decoded path starts with `/`, has no `.` or
//! `..` segment, no empty segment but a trailing one, no backslash or control character, and
//! the route name and the path as sent are taken from the target itself.
#![no_main]

use agentguard_egress::{check_route_head, parse_head, parse_route_target, path_allowed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = parse_head(data) else {
        return;
    };
    if check_route_head(data).is_ok() {
        let text = String::from_utf8_lossy(data).to_ascii_lowercase();
        assert!(text.matches("\r\ncontent-length:").count() <= 1, "{text:?}");
        assert!(!request.target.contains(['\t', '"', '<', '>', '{', '}', '|']), "{text:?}");
    }
    let Ok(target) = parse_route_target(request.target, 3128) else {
        return;
    };
    assert!(request.target.contains(target.rest));
    assert!(!target.route.contains('/') && !target.route.contains('?'));
    let decoded = &target.decoded;
    assert!(decoded.starts_with('/'), "{decoded:?}");
    assert!(!decoded.contains('\\') && !decoded.chars().any(char::is_control), "{decoded:?}");
    let segments: Vec<&str> = decoded.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        let name = segment.split(';').next().unwrap_or_default();
        assert!(name != "." && name != "..", "{decoded:?}");
        assert!(!segment.is_empty() || i + 1 == segments.len(), "{decoded:?}");
    }
    let prefixes = ["/a/".to_owned(), "/b".to_owned()];
    if path_allowed(&prefixes, decoded) {
        assert!(decoded == "/a" || decoded == "/b" || decoded.starts_with("/a/") || decoded.starts_with("/b/"), "{decoded:?}");
    }
});

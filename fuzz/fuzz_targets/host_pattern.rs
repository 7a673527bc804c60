//! The canonical host form and pattern matching: the first line is a pattern, the second a
//! host. The canonical form is a fixed point, and a pattern never matches an IP literal.
#![no_main]

use agentguard_policy::{Host, HostPattern};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (pattern, host) = text.split_once('\n').unwrap_or((text, text));
    let host = Host::parse(host);
    if let Ok(host) = &host {
        let shown = host.to_string();
        assert_eq!(Host::parse(&shown).as_ref(), Ok(host), "{shown}");
    }
    if let (Ok(pattern), Ok(host)) = (HostPattern::parse(pattern), host) {
        if matches!(host, Host::Ip(_)) {
            assert!(!pattern.matches(&host));
        }
    }
});

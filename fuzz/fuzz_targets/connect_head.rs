//! The CONNECT request head and target: `parse_head`, then `Authority::parse` of its target,
//! exactly as the proxy reads a client. Nothing may panic, and a parsed target must print
//! back to a form that parses to the same value.
#![no_main]

use agentguard_policy::Authority;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = agentguard_egress::parse_head(data)
        && let Ok(authority) = Authority::parse(request.target, None)
    {
        let again = Authority::parse(&authority.to_string(), None).expect("canonical form parses");
        assert_eq!(again, authority);
    }
});

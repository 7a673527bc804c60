//! The https URL parser of the fetcher: nothing may panic, and the canonical URL it prints
//! parses to the same URL.
#![no_main]

use agentguard_netpin::HttpsUrl;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(url) = HttpsUrl::parse(text) {
        let again = HttpsUrl::parse(&url.to_string()).expect("the canonical URL parses");
        assert_eq!(again, url);
    }
});

//! The ClientHello reader of the TLS name check: nothing may panic on any bytes, and a
//! prefix of input that reads as complete stays complete with the same name when more
//! bytes follow.
#![no_main]

use agentguard_egress::{Hello, server_name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = server_name(data);
    if let Hello::Complete(name) = &whole {
        let mut longer = data.to_vec();
        longer.extend_from_slice(b"more bytes after the hello");
        assert_eq!(server_name(&longer), Hello::Complete(name.clone()));
    }
});

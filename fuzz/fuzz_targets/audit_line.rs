//! The audit verifier on arbitrary bytes (the corpus is valid logs, which libFuzzer mutates):
//! it never panics, and what it accepts is exactly what it would write.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = agentguard_audit::Key::new(b"a fuzzing key of enough bytes".to_vec()).ok();
    let _ = agentguard_audit::verify(data, key);
    if let Ok(summary) = agentguard_audit::verify(data, None) {
        assert!(summary.good_bytes as usize <= data.len());
        assert_eq!(
            summary.good_bytes as usize,
            data.len(),
            "a log that verifies is verified whole"
        );
    }
});

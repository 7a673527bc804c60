//! A route response's body as a hostile upstream sends it: the redactor over any bytes, cut
//! into any chunks. Nothing may panic; the streamed result is the one-shot result (no chunking
//! lets a piece through that the whole would catch); the secret never comes out whole.
#![no_main]

use agentguard_egress::fuzzing::redact;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&len, rest)) = data.split_first() else {
        return;
    };
    let len = usize::from(len % 24) + 1;
    if rest.len() < len + 1 {
        return;
    }
    // A secret of lower-case letters and digits: never part of `[REDACTED]` itself.
    let secret: Vec<u8> = rest[..len]
        .iter()
        .map(|b| b"abcdefghijklmnopqrstuvwxyz0123456789"[usize::from(*b) % 36])
        .collect();
    let (cuts, body) = rest[len..].split_at(1);
    let step = usize::from(cuts[0] % 7) + 1;
    let chunks: Vec<&[u8]> = body.chunks(step).collect();
    let (streamed, whole) = redact(&secret, &chunks);
    assert_eq!(streamed, whole, "chunking changed the result");
    // The header's fixed `Bearer` is kept before `[REDACTED]` by design (in every encoding
    // the redactor knows: `Bearer `, `Bearer+`, `Bearer%20`): a secret that is a piece of it
    // (the letter `a`) shows there whatever the redactor does, so it is not searched for.
    if b"Bearer".windows(secret.len()).any(|w| w == secret.as_slice()) {
        return;
    }
    assert!(
        !streamed.windows(secret.len()).any(|w| w == secret.as_slice()),
        "the secret came out whole"
    );
});

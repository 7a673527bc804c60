//! The redactor against a hostile upstream: every cut of the input, every encoded form, pieces
//! mid-body and at its end.

use super::*;

const SECRET: &[u8] = b"s3cr3t/token-0123";

fn patterns() -> Vec<Pattern> {
    let mut value = b"Bearer ".to_vec();
    value.extend_from_slice(SECRET);
    vec![Pattern::secret(SECRET.to_vec()), Pattern::after(value, 7)]
}

fn stream(patterns: &[Pattern], chunks: &[&[u8]]) -> Vec<u8> {
    let mut r = Redactor::new(patterns.to_vec());
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(r.push(chunk));
    }
    out.extend(r.finish());
    out
}

/// `whole` streamed in three pieces cut at every pair of points, and byte by byte: always `want`.
fn every_cut(patterns: &[Pattern], whole: &[u8], want: &[u8]) {
    for i in 0..=whole.len() {
        for j in i..=whole.len() {
            let got = stream(patterns, &[&whole[..i], &whole[i..j], &whole[j..]]);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(want),
                "cut at {i} and {j}"
            );
        }
    }
    let bytewise: Vec<&[u8]> = whole.chunks(1).collect();
    assert_eq!(stream(patterns, &bytewise), want);
    assert_eq!(redact_all(patterns, whole), want, "as one header value");
}

#[test]
fn a_secret_split_across_chunks_is_replaced() {
    let p = vec![Pattern::secret(b"s3cr3t-token".to_vec())];
    every_cut(
        &p,
        b"auth=s3cr3t-token; again s3cr3t-token.",
        b"auth=[REDACTED]; again [REDACTED].",
    );
}

#[test]
fn encoded_forms_of_the_secret_are_replaced() {
    let p = patterns();
    for form in [
        r"s3cr3t\/token-0123".to_owned(),
        "s3cr3t%2Ftoken-0123".to_owned(),
        "s3cr3t%2ftoken-0123".to_owned(),
        r"s3cr3t\u002ftoken-0123".to_owned(),
        r"s3cr3t\u002Ftoken-0123".to_owned(),
        // Every byte escaped, and a mix of all forms.
        SECRET.iter().map(|b| format!(r"\u{b:04x}")).collect(),
        SECRET.iter().map(|b| format!("%{b:02X}")).collect(),
        r"%733cr\u0033t\/tok%65n-0123".to_owned(),
    ] {
        let body = format!(r#"{{"echo": "{form}", "n": 1}}"#);
        every_cut(&p, body.as_bytes(), br#"{"echo": "[REDACTED]", "n": 1}"#);
    }
    // The header value in a form body: `+` for the space.
    every_cut(
        &p,
        b"h=Bearer+s3cr3t%2Ftoken-0123&x",
        b"h=Bearer+[REDACTED]&x",
    );
}

#[test]
fn a_reflection_cut_at_every_offset_inside_the_secret_leaks_nothing() {
    let p = patterns();
    for k in 1..=SECRET.len() {
        let mut body = b"{\"auth\": \"Bearer ".to_vec();
        body.extend_from_slice(&SECRET[..k]);
        every_cut(&p, &body, b"{\"auth\": \"Bearer [REDACTED]");
        // The same piece alone at the end, without the header's prefix: from MIN_TAIL bytes.
        let mut alone = b"token ".to_vec();
        alone.extend_from_slice(&SECRET[..k]);
        let want: &[u8] = if k >= MIN_TAIL {
            b"token [REDACTED]"
        } else {
            &alone
        };
        every_cut(&p, &alone, want);
    }
    // A header value that ends in the secret's first letter is left alone.
    every_cut(&p, b"yes", b"yes");
    // Nothing of the secret: nothing replaced.
    every_cut(&p, b"{\"auth\": \"Bearer ", b"{\"auth\": \"Bearer ");
}

#[test]
fn a_piece_shown_mid_body_is_replaced() {
    let p = patterns();
    // An error page showing the header's first 12 characters, then more text.
    every_cut(
        &p,
        b"<p>got Bearer s3cr... which is invalid</p>",
        b"<p>got Bearer [REDACTED]... which is invalid</p>",
    );
    // The secret's first MIN_FRAGMENT bytes alone, then something else.
    let mut body = b"id ".to_vec();
    body.extend_from_slice(&SECRET[..MIN_FRAGMENT]);
    body.extend_from_slice(b"!! end");
    every_cut(&p, &body, b"id [REDACTED]!! end");
    // Fewer bytes than that, mid-body, are ordinary text (the documented limit).
    let mut short = b"id ".to_vec();
    short.extend_from_slice(&SECRET[..MIN_FRAGMENT - 1]);
    short.extend_from_slice(b"!! end");
    every_cut(&p, &short, &short);
}

#[test]
fn bytes_that_cannot_begin_a_secret_are_sent_at_once() {
    let mut r = Redactor::new(patterns());
    assert_eq!(r.push(b"data: one\n\n"), b"data: one\n\n".to_vec());
    assert_eq!(r.push(b"data: s3"), b"data: ".to_vec());
    assert_eq!(r.push(b"x\n\n"), b"s3x\n\n".to_vec());
    assert_eq!(r.push(b"100%"), b"100".to_vec());
    assert_eq!(
        r.finish(),
        b"%".to_vec(),
        "a lone % is no piece of the secret"
    );
}

#[test]
fn several_patterns_and_headers() {
    let p = vec![
        Pattern::secret(b"tok".to_vec()),
        Pattern::secret(b"dXNlcjp0b2s".to_vec()),
    ];
    assert_eq!(
        redact_all(&p, b"Basic dXNlcjp0b2s= tok"),
        b"Basic [REDACTED]= [REDACTED]".to_vec()
    );
    assert_eq!(
        stream(&p, &[b"dXNlcjp0", b"b2s=!"]),
        b"[REDACTED]=!".to_vec()
    );
}

#[test]
fn a_secret_of_escapes_is_bounded() {
    // Many `%` and `\`: the matcher's branches stay within its budget and fail closed.
    let secret = b"%%%%\\\\\\\\%%%%\\\\\\\\%%%%".to_vec();
    let p = vec![Pattern::secret(secret.clone())];
    let mut hay = Vec::new();
    for _ in 0..50 {
        hay.extend_from_slice(b"%25%5c");
    }
    let out = redact_all(&p, &hay);
    assert!(!out.windows(secret.len()).any(|w| w == secret.as_slice()));
    every_cut(&p, &secret, b"[REDACTED]");
}

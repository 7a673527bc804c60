//! Unit tests of the URL parser: what is accepted, canonicalized, and refused.

use crate::HttpsUrl;

fn parse(input: &str) -> String {
    match HttpsUrl::parse(input) {
        Ok(url) => format!("ok {url}"),
        Err(e) => format!("err {e}"),
    }
}

#[test]
fn accepted_urls_are_canonical() {
    let cases = [
        (
            "https://pkgs.example.com/simple/",
            "ok https://pkgs.example.com/simple/",
        ),
        (
            "HTTPS://PKGS.Example.COM./a?b=c",
            "ok https://pkgs.example.com/a?b=c",
        ),
        ("https://pkgs.example.com", "ok https://pkgs.example.com/"),
        (
            "https://pkgs.example.com?x=1",
            "ok https://pkgs.example.com/?x=1",
        ),
        (
            "https://pkgs.example.com:443/",
            "ok https://pkgs.example.com/",
        ),
        (
            "https://pkgs.example.com:8443/a#frag",
            "ok https://pkgs.example.com:8443/a",
        ),
        (
            "https://bücher.example/",
            "ok https://xn--bcher-kva.example/",
        ),
        ("https://[::1]:8443/", "ok https://[::1]:8443/"),
        ("https://0x7f.1/", "ok https://127.0.0.1/"),
        ("https://2130706433/", "ok https://127.0.0.1/"),
        (
            "https://pkgs.example.com/a%20b",
            "ok https://pkgs.example.com/a%20b",
        ),
    ];
    for (input, want) in cases {
        assert_eq!(parse(input), want, "{input}");
    }
}

#[test]
fn refused_urls_say_why() {
    let cases = [
        ("http://pkgs.example.com/", "scheme \"http\" is not allowed"),
        ("ftp://pkgs.example.com/", "scheme \"ftp\""),
        ("pkgs.example.com/", "not an absolute URL"),
        ("https://user@pkgs.example.com/", "userinfo"),
        ("https://user:pw@pkgs.example.com/", "userinfo"),
        ("https://pkgs.example.com@evil.example.test/", "userinfo"),
        ("https://pkgs.example.com\\@evil.example.test/", "backslash"),
        ("https:/\\pkgs.example.com/", "backslash"),
        ("https://pkgs.example.com/a b", "' '"),
        ("https://pkgs.example.com/\n", "'\\n'"),
        (" https://pkgs.example.com/", "' '"),
        ("https://pkgs.example.com/é", "must be percent-encoded"),
        ("https://pkgs.example.com:0/", "out of range"),
        ("https://pkgs.example.com:65536/", "out of range"),
        ("https://pkgs.example.com:/", "not a number"),
        ("https://pkgs.example.com:44x/", "not a number"),
        ("https:///path", "no host"),
        ("https://[::1/", "missing its `]`"),
        ("https://[::1]x/", "unexpected"),
        ("https://pkgs%2eexample.com/", "'%'"),
        ("https://a..b/", "empty label"),
        ("https://1.2.3.4.5/", "IPv4"),
    ];
    for (input, needle) in cases {
        let got = parse(input);
        assert!(
            got.starts_with("err ") && got.contains(needle),
            "{input:?}: {got}"
        );
    }
}

#[test]
fn every_fetch_error_reports_a_listed_reason() {
    use std::time::Duration;

    use crate::{DialError, FetchError, PinError, UrlError};
    use agentguard_policy::{Denial, Reason};

    let errors = [
        FetchError::InvalidUrl(UrlError::Syntax("x".into())),
        FetchError::Denied(Denial {
            reason: Reason::DomainNotAllowed,
            message: "x".into(),
        }),
        FetchError::Pin(PinError::Dns {
            name: "x".into(),
            source: "nxdomain".into(),
        }),
        FetchError::Pin(PinError::TooManyAnswers {
            name: "x".into(),
            count: 40,
            limit: 32,
        }),
        FetchError::Dial(DialError::Timeout {
            limit: Duration::from_secs(1),
        }),
        FetchError::Dial(DialError::Connect {
            name: "x".into(),
            attempts: Vec::new(),
        }),
        FetchError::Timeout {
            stage: "fetch",
            limit: Duration::from_secs(1),
        },
        FetchError::Tls {
            addr: "127.0.0.2:443".parse().unwrap(),
            source: std::io::Error::other("x"),
        },
        FetchError::Http("x".into()),
        FetchError::Redirect {
            status: 302,
            location: "x".into(),
        },
        FetchError::BodyTooLarge { limit: 1 },
        FetchError::Audit(agentguard_audit::Error::WeakKey { min: 16, len: 1 }),
    ];
    for error in &errors {
        let code = error.reason();
        assert!(
            FetchError::REASONS.contains(&code) || Reason::ALL.iter().any(|r| r.code() == code),
            "{code} is not listed"
        );
    }
    let seen: Vec<&str> = errors.iter().map(FetchError::reason).collect();
    for listed in FetchError::REASONS {
        assert!(
            seen.contains(listed),
            "{listed} is listed but never reported"
        );
    }
}

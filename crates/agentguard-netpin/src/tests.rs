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

//! Credential routes against a hostile upstream that controls every byte of its answer
//! (issue 34, items 1 to 8): it reflects the credential in its reason phrase, in pieces, in
//! encodings, sets cookies, answers with codings redaction cannot read; clients try the
//! servlet `;` escape and the method-override headers; heads hyper would refuse with a bare
//! 400 get the proxy's own refusal.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{Kind, MemorySink, Record};
use agentguard_egress::{Credential, EgressProxy, Route, Secret};
use agentguard_netpin::DnsResolver;
use agentguard_policy::parse_cidr;
use agentguard_test_support::{Answer, FakeDns, TestCa, TlsUpstream, UpstreamOptions};
use base64::Engine as _;

use crate::{GOOD, Reply, body, send};

/// Holds a `/`, a `+` and a space-free run long enough for every piece rule.
const SECRET: &str = "s3cr3t/token+0123456789abcdef";

/// The request's `Authorization` value, as the upstream read it.
fn authorization(head: &str) -> String {
    head.split("\r\n")
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("authorization")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default()
}

/// The request's path.
fn path(head: &str) -> String {
    head.split_whitespace().nth(1).unwrap_or("/").to_owned()
}

/// A response with `status_line`, `headers` and `body`, framed by a length.
fn answer(status_line: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{status_line}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The hostile upstream: what it answers depends on the path.
fn hostile(head: &str, _body: &[u8]) -> Vec<u8> {
    let auth = authorization(head);
    let token = auth.strip_prefix("Bearer ").unwrap_or_default().to_owned();
    let path = path(head);
    let json_escaped = token.replace('/', "\\/");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&token);
    let b64_url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&token);
    match path.as_str() {
        "/reason" => answer(&format!("HTTP/1.1 401 Invalid credentials {auth}"), "", b""),
        "/reason-odd" => answer(&format!("HTTP/1.1 599 {auth}"), "", b"x"),
        "/head" => answer("HTTP/1.1 200 OK", "", head.as_bytes()),
        "/partial" => answer(
            "HTTP/1.1 206 Partial Content",
            "Content-Range: bytes 0-5/40\r\n",
            &auth.as_bytes()[..6],
        ),
        "/cookie" => answer(
            "HTTP/1.1 200 OK",
            "Set-Cookie: session=opened-with-the-token; Path=/\r\nSet-Cookie2: old=1\r\nX-Kept: yes\r\n",
            b"ok",
        ),
        "/te-gzip" => {
            let mut out =
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
                    .to_vec();
            out.extend_from_slice(format!("{:x}\r\n{auth}\r\n0\r\n\r\n", auth.len()).as_bytes());
            out
        }
        "/ce-two" => answer(
            "HTTP/1.1 200 OK",
            "Content-Encoding: identity\r\nContent-Encoding: gzip\r\n",
            auth.as_bytes(),
        ),
        "/ce-list" => answer(
            "HTTP/1.1 200 OK",
            "Content-Encoding: identity, gzip\r\n",
            auth.as_bytes(),
        ),
        "/ce-identity" => answer(
            "HTTP/1.1 200 OK",
            "Content-Encoding: identity\r\n",
            b"plain",
        ),
        "/json" => answer(
            "HTTP/1.1 200 OK",
            "Content-Type: application/json\r\n",
            format!(r#"{{"token": "{json_escaped}"}}"#).as_bytes(),
        ),
        "/unicode" => {
            let escaped: String = token.bytes().map(|b| format!("\\u{b:04x}")).collect();
            answer("HTTP/1.1 200 OK", "", escaped.as_bytes())
        }
        "/percent" => {
            let escaped: String = token.bytes().map(|b| format!("%{b:02X}")).collect();
            answer("HTTP/1.1 200 OK", "", escaped.as_bytes())
        }
        "/base64" => answer(
            "HTTP/1.1 200 OK",
            &format!("X-B64: {b64}\r\n"),
            format!("{b64} {b64_url}").as_bytes(),
        ),
        cut if cut.starts_with("/cut/") => {
            // The header value cut at the offset given, inside the secret.
            let k: usize = cut[5..].parse().unwrap_or(0);
            let end = ("Bearer ".len() + k).min(auth.len());
            answer("HTTP/1.1 200 OK", "", &auth.as_bytes()[..end])
        }
        _ => answer("HTTP/1.1 200 OK", "", b"hello"),
    }
}

struct Hostile {
    _dns: FakeDns,
    upstream: TlsUpstream,
    audit: Arc<MemorySink>,
    proxy: EgressProxy,
}

impl Hostile {
    async fn start() -> Hostile {
        let dns = FakeDns::start().await;
        dns.answer("api.example.test", &[GOOD]);
        let ca = TestCa::new("hostile upstream CA");
        let options = UpstreamOptions {
            answer: Some(Answer::new(hostile)),
            ..UpstreamOptions::default()
        };
        let config = ca.server_config(&["api.example.test"]);
        let upstream = TlsUpstream::start_with(GOOD, 0, config, options)
            .await
            .unwrap();
        let url = format!("https://api.example.test:{}", upstream.addr().port());
        let route = Route::builder("api", &url, Secret::new(SECRET).unwrap())
            .credential(Credential::Header {
                name: "Authorization".into(),
                template: "Bearer {secret}".into(),
            })
            .method("GET")
            .path("/")
            .allow_cidr(parse_cidr("127.0.0.2/32").unwrap())
            .ca_pem(ca.pem())
            .bundled_roots(false)
            .build()
            .unwrap();
        let audit = Arc::new(MemorySink::default());
        let resolver = DnsResolver::with_nameservers(&[dns.addr()]).unwrap();
        let proxy = EgressProxy::builder()
            .bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
            .resolver(Arc::new(resolver))
            .audit(audit.clone())
            .route(Arc::new(route))
            .start()
            .await
            .unwrap();
        Hostile {
            _dns: dns,
            upstream,
            audit,
            proxy,
        }
    }

    async fn get(&self, path: &str, extra: &str) -> Reply {
        let raw = format!("GET /api{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n");
        let reply = send(self.proxy.local_addr(), raw.as_bytes()).await;
        assert_no_piece(&reply);
        reply
    }
}

/// The route events, once there are `n`.
async fn route_events(audit: &Arc<MemorySink>, n: usize) -> Vec<Record> {
    let audit = Arc::clone(audit);
    let routes = |r: &[Record]| -> Vec<Record> {
        r.iter()
            .filter(|r| r.kind == Kind::EgressRoute)
            .cloned()
            .collect()
    };
    tokio::task::spawn_blocking(move || {
        let records = audit.wait_until(Duration::from_secs(10), |r| routes(r).len() >= n);
        routes(&records.unwrap_or_else(|| panic!("fewer than {n} route events")))
    })
    .await
    .unwrap()
}

/// Nothing of the secret in a reply: not whole, not in any of the encodings the upstream
/// used, not its first `MIN_FRAGMENT` (8) characters.
fn assert_no_piece(reply: &Reply) {
    let text = format!("{}\r\n\r\n{}", reply.head, reply.body);
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(SECRET);
    for needle in [
        SECRET,
        &SECRET.replace('/', "\\/"),
        &SECRET[..8],
        &b64,
        "s3cr3t%2F",
        "\\u0073\\u0033",
    ] {
        assert!(
            !text.contains(needle),
            "{needle:?} reached the client: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn r34_1_the_reason_phrase_is_the_codes_own() {
    let h = Hostile::start().await;
    let reply = h.get("/reason", "").await;
    assert!(
        reply.head.starts_with("HTTP/1.1 401 Unauthorized\r\n"),
        "{}",
        reply.head
    );
    let reply = h.get("/reason-odd", "").await;
    assert_eq!(reply.status, 599, "{reply:?}");
    assert!(!reply.head.lines().next().unwrap().contains("Bearer"));
}

#[tokio::test(flavor = "multi_thread")]
async fn r34_2_no_piece_of_the_secret_comes_back() {
    let h = Hostile::start().await;
    // The client's Range and If-Range never go up.
    let reply = h
        .get("/head", "Range: bytes=0-5\r\nIf-Range: \"x\"\r\n")
        .await;
    assert_eq!(reply.status, 200);
    let head = h.upstream.seen().last().unwrap().head.to_ascii_lowercase();
    assert!(
        !head.contains("range:") && !head.contains("if-range"),
        "{head}"
    );
    // A 206 nobody asked for is refused before a byte is sent.
    let reply = h.get("/partial", "Range: bytes=0-5\r\n").await;
    assert_eq!(reply.status, 502, "{reply:?}");
    assert_eq!(
        reply.header("x-agentguard-reason").as_deref(),
        Some("partial_response")
    );
    // A reflection cut at every offset inside the secret: only [REDACTED] comes back.
    for k in 1..=SECRET.len() {
        let reply = h.get(&format!("/cut/{k}"), "").await;
        assert_eq!(reply.status, 200);
        assert!(
            body(&reply).ends_with("[REDACTED]"),
            "cut at {k}: {reply:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn r34_3_servlet_path_parameters_cannot_climb_out() {
    let h = Hostile::start().await;
    for path in [
        "/repos/acme/widget/..;/..;/..;/admin/users",
        "/repos/acme/widget/.;/x",
        "/repos/acme/widget/..;jsessionid=1/admin",
        "/repos/acme/widget/..%3b/admin",
    ] {
        let reply = h.get(path, "").await;
        assert_eq!(reply.status, 403, "{path}: {reply:?}");
        assert_eq!(
            reply.header("x-agentguard-reason").as_deref(),
            Some("path_not_allowed"),
            "{path}"
        );
    }
    assert!(h.upstream.seen().is_empty(), "nothing was sent upstream");
    // Each refusal is recorded with the route and the path as sent (item 8).
    let paths: Vec<String> = route_events(&h.audit, 4)
        .await
        .iter()
        .map(|r| {
            assert_eq!(r.subject["route"], "api");
            r.subject["path"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(
        paths.contains(&"/repos/acme/widget/..%3b/admin".to_owned()),
        "{paths:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn r34_4_cookies_never_come_back() {
    let h = Hostile::start().await;
    let reply = h.get("/cookie", "Cookie: mine=1\r\n").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("set-cookie"), None, "{}", reply.head);
    assert_eq!(reply.header("set-cookie2"), None, "{}", reply.head);
    assert_eq!(reply.header("x-kept").as_deref(), Some("yes"));
    let head = h.upstream.seen().last().unwrap().head.to_ascii_lowercase();
    assert!(!head.contains("\r\ncookie:"), "{head}");
}

#[tokio::test(flavor = "multi_thread")]
async fn r34_5_codings_other_than_identity_and_chunked_are_refused() {
    let h = Hostile::start().await;
    for path in ["/te-gzip", "/ce-two", "/ce-list"] {
        let reply = h.get(path, "").await;
        assert_eq!(reply.status, 502, "{path}: {reply:?}");
        assert_eq!(
            reply.header("x-agentguard-reason").as_deref(),
            Some("encoded_response"),
            "{path}"
        );
    }
    let reply = h.get("/ce-identity", "").await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(body(&reply), "plain");
}

#[tokio::test(flavor = "multi_thread")]
async fn r34_6_override_headers_never_go_up() {
    let h = Hostile::start().await;
    let overrides = "X-HTTP-Method-Override: DELETE\r\nX-HTTP-Method: DELETE\r\nX-Method-Override: DELETE\r\nX-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\n";
    let reply = h.get("/head", overrides).await;
    assert_eq!(reply.status, 200);
    let head = h.upstream.seen().last().unwrap().head.to_ascii_lowercase();
    for name in [
        "x-http-method-override",
        "x-http-method:",
        "x-method-override",
        "x-original-url",
        "x-rewrite-url",
    ] {
        assert!(!head.contains(name), "{name} went up: {head}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn r34_7_encoded_reflections_are_redacted() {
    let h = Hostile::start().await;
    for path in ["/json", "/unicode", "/percent", "/base64"] {
        let reply = h.get(path, "").await;
        assert_eq!(reply.status, 200, "{path}");
        assert!(body(&reply).contains("[REDACTED]"), "{path}: {reply:?}");
    }
    let reply = h.get("/base64", "").await;
    assert_eq!(reply.header("x-b64").as_deref(), Some("[REDACTED]="));
}

#[tokio::test(flavor = "multi_thread")]
async fn r34_8_every_malformed_route_request_carries_the_reason_headers() {
    let h = Hostile::start().await;
    for raw in [
        "GET /api/a\tb HTTP/1.1\r\n\r\n",
        "GET /api/\"x HTTP/1.1\r\n\r\n",
        "GET /api/<x> HTTP/1.1\r\n\r\n",
        "GET /api/{x} HTTP/1.1\r\n\r\n",
        "GET /api/a|b HTTP/1.1\r\n\r\n",
        "POST /api/x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
        "POST /api/x HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
        "POST /api/x HTTP/1.1\r\nContent-Length: +2\r\n\r\nab",
    ] {
        let reply = send(h.proxy.local_addr(), raw.as_bytes()).await;
        assert_eq!(reply.status, 400, "{raw:?}: {reply:?}");
        assert_eq!(
            reply.header("x-agentguard-reason").as_deref(),
            Some("malformed_request"),
            "{raw:?}: {}",
            reply.head
        );
        assert_eq!(
            reply.header("x-agentguard-decision").as_deref(),
            Some("policy")
        );
    }
    assert!(h.upstream.seen().is_empty(), "nothing was sent upstream");
    for event in route_events(&h.audit, 8).await {
        assert_eq!(event.reason, "malformed_request");
        assert_eq!(event.subject["route"], "api", "{event:?}");
    }
}

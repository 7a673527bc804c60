//! Credential routes against a real TLS upstream with the test CA on 127.0.0.2 (and a
//! "private" one on 127.0.0.3): the credential added and the client's own dropped, every
//! refusal with nothing sent upstream, traversal in every encoding, redaction across chunk
//! boundaries, server-sent events as they arrive, redirects rewritten, the body cap, the
//! response deadline, an untrusted certificate, and curl as a real client.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use agentguard_audit::{Decision, Kind, MemorySink};
use agentguard_egress::{Credential, EgressProxy, EgressProxyBuilder, Route, Secret};
use agentguard_netpin::DnsResolver;
use agentguard_policy::parse_cidr;
use agentguard_test_support::{CLIENT_ENV, FakeDns, TestCa, TlsUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{BAD, GOOD, body, parse_reply, send};

const SECRET: &str = "s3cr3t-token-0123456789";

struct Setup {
    dns: FakeDns,
    ca: TestCa,
    upstream: TlsUpstream,
    private: TlsUpstream,
    audit: Arc<MemorySink>,
}

impl Setup {
    async fn start() -> Setup {
        let dns = FakeDns::start().await;
        let ca = TestCa::new("route test CA");
        let names = ["api.example.test", "private.example.test"];
        let upstream = TlsUpstream::start(GOOD, 0, ca.server_config(&names)).await;
        let private = TlsUpstream::start(BAD, 0, ca.server_config(&names)).await;
        dns.answer("api.example.test", &[GOOD]);
        dns.answer("private.example.test", &[BAD]);
        Setup {
            dns,
            ca,
            upstream,
            private,
            audit: Arc::new(MemorySink::default()),
        }
    }

    /// The route `api` to the upstream: a bearer header, GET and POST, the test CA,
    /// 127.0.0.2/32 reachable, and `paths`.
    fn route(&self, paths: &[&str]) -> agentguard_egress::RouteBuilder {
        let url = format!("https://api.example.test:{}", self.upstream.addr().port());
        let mut route = Route::builder("api", &url, Secret::new(SECRET).unwrap())
            .credential(Credential::Header {
                name: "Authorization".into(),
                template: "Bearer {secret}".into(),
            })
            .method("GET")
            .method("POST")
            .allow_cidr(parse_cidr("127.0.0.2/32").unwrap())
            .ca_pem(self.ca.pem())
            .bundled_roots(false);
        for path in paths {
            route = route.path(path);
        }
        route
    }

    /// A proxy on 127.0.0.1:0 serving `routes` and nothing else.
    fn proxy(&self, routes: Vec<Route>) -> EgressProxyBuilder {
        let resolver = DnsResolver::with_nameservers(&[self.dns.addr()]).unwrap();
        routes.into_iter().fold(
            EgressProxy::builder()
                .bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
                .resolver(Arc::new(resolver))
                .audit(self.audit.clone()),
            |proxy, route| proxy.route(Arc::new(route)),
        )
    }

    async fn api(&self) -> EgressProxy {
        let route = self.route(&["/echo", "/sse", "/hang", "/location"]);
        self.proxy(vec![route.build().unwrap()])
            .response_timeout(Duration::from_secs(1))
            .start()
            .await
            .unwrap()
    }

    /// The route events, once there are `n` (an event is recorded just after its
    /// connection closes, so a client may see the close first).
    async fn route_events(&self, n: usize) -> Vec<agentguard_audit::Record> {
        let audit = Arc::clone(&self.audit);
        let routes = |records: &[agentguard_audit::Record]| -> Vec<agentguard_audit::Record> {
            records
                .iter()
                .filter(|r| r.kind == Kind::EgressRoute)
                .cloned()
                .collect()
        };
        tokio::task::spawn_blocking(move || {
            let within = Duration::from_secs(10);
            match audit.wait_until(within, |records| routes(records).len() >= n) {
                Some(records) => routes(&records),
                None => panic!("fewer than {n} route events: {:?}", audit.records()),
            }
        })
        .await
        .unwrap()
    }

    /// No record, no reply holds the secret (in any form the proxy knows).
    fn assert_no_secret(&self, replies: &[&str]) {
        for line in self.audit.lines() {
            assert!(
                !line.contains(SECRET),
                "the secret is in the audit log: {line}"
            );
        }
        for reply in replies {
            assert!(
                !reply.contains(SECRET),
                "the secret reached the client: {reply}"
            );
        }
    }
}

fn get(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n").into_bytes()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_route_adds_the_credential_and_replaces_the_clients_own() {
    let s = Setup::start().await;
    let proxy = s.api().await;
    let extra = "Authorization: Bearer the-clients-own\r\nCookie: session=1\r\nProxy-Authorization: Basic eA==\r\nX-Kept: yes\r\nAccept-Encoding: gzip\r\n";
    let reply = send(proxy.local_addr(), &get("/api/echo?q=1", extra)).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let seen = s.upstream.seen();
    assert_eq!(seen.len(), 1);
    let head = seen[0].head.to_ascii_lowercase();
    assert_eq!(seen[0].sni.as_deref(), Some("api.example.test"));
    assert!(head.starts_with("get /echo?q=1 http/1.1\r\n"), "{head}");
    assert!(
        head.contains(&format!(
            "authorization: bearer {}",
            SECRET.to_ascii_lowercase()
        )),
        "{head}"
    );
    assert!(
        !head.contains("the-clients-own")
            && !head.contains("cookie")
            && !head.contains("proxy-authorization"),
        "{head}"
    );
    assert!(
        head.contains(&format!(
            "host: api.example.test:{}",
            s.upstream.addr().port()
        )),
        "{head}"
    );
    assert!(
        head.contains("accept-encoding: identity") && !head.contains("gzip"),
        "{head}"
    );
    assert!(head.contains("x-kept: yes"), "{head}");
    // The upstream echoes the header in a header and in the body: both come back redacted.
    assert_eq!(
        reply.header("x-echo-auth").as_deref(),
        Some("Bearer [REDACTED]")
    );
    assert!(body(&reply).contains("Bearer [REDACTED]"), "{}", reply.body);
    s.assert_no_secret(&[&reply.head, &reply.body]);
    let events = s.route_events(1).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(
        (event.decision, event.reason.as_str()),
        (Decision::Allow, "ok")
    );
    assert_eq!(event.subject["route"], "api");
    assert_eq!(event.subject["path"], "/echo", "the path without its query");
    assert_eq!(event.data["method"], "GET");
    assert_eq!(event.data["status"], 200);
    assert_eq!(event.data["bytes_down"], body(&reply).len() as u64);
    assert_eq!(event.data["dialed"], s.upstream.addr().to_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn every_refusal_is_answered_and_audited_with_nothing_sent_upstream() {
    let s = Setup::start().await;
    let proxy = s.api().await;
    let addr = proxy.local_addr();
    let port = addr.port();
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (get("/other/echo", ""), 403, "route_not_allowed"),
        (get("/", ""), 403, "route_not_allowed"),
        (
            b"DELETE /api/echo HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            405,
            "method_not_allowed",
        ),
        (get("/api/private", ""), 403, "path_not_allowed"),
        (get("/api/echox", ""), 403, "path_not_allowed"),
        (get("/api/echo/../private", ""), 403, "path_not_allowed"),
        (get("/api/echo/%2e%2e/private", ""), 403, "path_not_allowed"),
        (get("/api/echo/%2E%2e/private", ""), 403, "path_not_allowed"),
        (get("/api/echo%2f..%2fprivate", ""), 403, "path_not_allowed"),
        (get("/api/echo%5c..%5cprivate", ""), 403, "path_not_allowed"),
        (get("/api//echo", ""), 403, "path_not_allowed"),
        (
            get("/api/echo/%252e%252e/private", ""),
            403,
            "path_not_allowed",
        ),
        (get("/api/echo\\..\\private", ""), 403, "path_not_allowed"),
        (
            get("http://pkgs.example.test/api/echo", ""),
            405,
            "method_not_allowed",
        ),
        (
            get(&format!("http://127.0.0.1:{}/api/echo", port + 1), ""),
            405,
            "method_not_allowed",
        ),
        (
            b"POST /api/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 20000000\r\n\r\n".to_vec(),
            413,
            "body_too_large",
        ),
    ];
    let mut replies = Vec::new();
    for (raw, status, reason) in &cases {
        let reply = send(addr, raw).await;
        let request = String::from_utf8_lossy(raw);
        assert_eq!(reply.status, *status, "{request}: {reply:?}");
        assert_eq!(
            reply.header("x-agentguard-reason").as_deref(),
            Some(*reason),
            "{request}"
        );
        assert!(reply.body.contains(reason), "{request}: {}", reply.body);
        replies.push(reply);
    }
    let methods = replies[2].header("allow").unwrap_or_default();
    assert_eq!(methods, "GET, POST");
    // CONNECT reaches nothing: this proxy serves only its route.
    let connect = send(
        addr,
        b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert_eq!(connect.status, 403, "{connect:?}");
    assert_eq!(
        s.upstream.seen(),
        Vec::new(),
        "nothing reached the upstream"
    );
    let events = s.route_events(cases.len()).await;
    assert_eq!(events.len(), cases.len(), "{events:?}");
    // Each event is recorded as its connection ends, so they may land out of order.
    assert!(
        events.iter().all(|e| e.decision == Decision::Deny),
        "{events:?}"
    );
    let mut got: Vec<(String, u64)> = events
        .iter()
        .map(|e| (e.reason.clone(), e.data["status"].as_u64().unwrap()))
        .collect();
    let mut want: Vec<(String, u64)> = cases
        .iter()
        .map(|(_, status, reason)| ((*reason).to_owned(), u64::from(*status)))
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let texts: Vec<String> = replies
        .iter()
        .map(|r| format!("{}{}", r.head, r.body))
        .collect();
    s.assert_no_secret(&texts.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_split_across_two_chunks_is_redacted() {
    let s = Setup::start().await;
    let route = s.route(&["/echo-split"]).build().unwrap();
    let proxy = s.proxy(vec![route]).start().await.unwrap();
    let reply = send(proxy.local_addr(), &get("/api/echo-split", "")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(body(&reply).contains("Bearer [REDACTED]"), "{}", reply.body);
    s.assert_no_secret(&[&reply.body]);
}

/// Asks the route for its server-sent events and reads until the first one (`data: one`)
/// arrived, within 20 s; returns the stream and what was read.
async fn first_event(proxy: SocketAddr) -> (TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream
        .write_all(&get("/api/sse", "Accept: text/event-stream\r\n"))
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let first = tokio::time::timeout(Duration::from_secs(20), async {
        while !String::from_utf8_lossy(&got).contains("data: one") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(
        first.is_ok(),
        "the first event did not arrive alone: {}",
        String::from_utf8_lossy(&got)
    );
    (stream, got)
}

#[tokio::test(flavor = "multi_thread")]
async fn server_sent_events_arrive_one_by_one() {
    let s = Setup::start().await;
    let proxy = s.api().await;
    // The second event is sent only after the first one arrived here: a proxy that waited
    // for the whole body would never deliver the first.
    let (mut stream, mut got) = first_event(proxy.local_addr()).await;
    assert!(!String::from_utf8_lossy(&got).contains("data: two"));
    s.upstream.release();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let reply = parse_reply(&got);
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert!(body(&reply).contains("data: two"), "{}", reply.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_are_passed_back_with_a_location_inside_the_base_rewritten() {
    let s = Setup::start().await;
    let proxy = s.api().await;
    let port = proxy.local_addr().port();
    let inside = format!(
        "https://api.example.test:{}/next?p=2",
        s.upstream.addr().port()
    );
    let reply = send(
        proxy.local_addr(),
        &get(&format!("/api/location?to={inside}"), ""),
    )
    .await;
    assert_eq!(reply.status, 302, "{reply:?}");
    assert_eq!(
        reply.header("location"),
        Some(format!("http://127.0.0.1:{port}/api/next?p=2"))
    );
    let outside = "https://elsewhere.example.test/next";
    let reply = send(
        proxy.local_addr(),
        &get(&format!("/api/location?to={outside}"), ""),
    )
    .await;
    assert_eq!(reply.status, 302);
    assert_eq!(
        reply.header("location").as_deref(),
        Some(outside),
        "passed back, not followed"
    );
    assert_eq!(
        s.upstream.seen().len(),
        2,
        "one request each, no redirect followed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_upstream_is_refused_before_anything_is_sent() {
    let s = Setup::start().await;
    let url = format!("https://private.example.test:{}", s.private.addr().port());
    let route = Route::builder("private", &url, Secret::new(SECRET).unwrap())
        .credential(Credential::Basic {
            user: "token".into(),
        })
        .allow_cidr(parse_cidr("127.0.0.2/32").unwrap())
        .ca_pem(s.ca.pem())
        .build()
        .unwrap();
    let proxy = s.proxy(vec![route]).start().await.unwrap();
    let reply = send(proxy.local_addr(), &get("/private/", "")).await;
    assert_eq!(reply.status, 403, "{reply:?}");
    assert_eq!(
        reply.header("x-agentguard-reason").as_deref(),
        Some("non_public_address")
    );
    assert!(
        !reply.body.contains("127.0.0.3"),
        "no DNS oracle: {}",
        reply.body
    );
    assert_eq!(s.private.seen(), Vec::new());
    let events = s.route_events(1).await;
    assert!(
        events[0].data["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.3")
    );
    s.assert_no_secret(&[&reply.body]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_upstream_meets_the_response_deadline() {
    let s = Setup::start().await;
    let proxy = s.api().await;
    let reply = send(proxy.local_addr(), &get("/api/hang", "")).await;
    assert_eq!(reply.status, 504, "{reply:?}");
    assert_eq!(
        reply.header("x-agentguard-reason").as_deref(),
        Some("response_timeout")
    );
    assert_eq!(
        s.upstream.seen().len(),
        1,
        "the request was sent, the answer never came"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn request_bodies_are_streamed_up_to_the_cap() {
    let s = Setup::start().await;
    let route = s.route(&["/echo"]).max_request_bytes(1024).build().unwrap();
    let proxy = s.proxy(vec![route]).start().await.unwrap();
    let body = "x".repeat(1000);
    let post = format!(
        "POST /api/echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let reply = send(proxy.local_addr(), post.as_bytes()).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(
        self::body(&reply).ends_with(&body),
        "the body reached the upstream and came back: {reply:?}"
    );
    // Chunked, so no length is declared: the cap is met while it streams.
    let chunk = "y".repeat(800);
    let chunked = format!(
        "POST /api/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n320\r\n{chunk}\r\n320\r\n{chunk}\r\n0\r\n\r\n"
    );
    let reply = send(proxy.local_addr(), chunked.as_bytes()).await;
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(
        reply.header("x-agentguard-reason").as_deref(),
        Some("body_too_large")
    );
    let events = s.route_events(2).await;
    let ok = events
        .iter()
        .find(|e| e.reason == "ok")
        .expect("the allowed post");
    assert_eq!(ok.data["bytes_up"], 1000);
    assert!(
        events.iter().any(|e| e.reason == "body_too_large"),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compressed_answer_and_one_that_is_not_http_are_refused() {
    let s = Setup::start().await;
    let route = s.route(&["/gzip", "/garbage"]).build().unwrap();
    let proxy = s.proxy(vec![route]).start().await.unwrap();
    for (path, status, reason) in [
        ("/api/gzip", 502, "encoded_response"),
        ("/api/garbage", 502, "http_error"),
    ] {
        let reply = send(proxy.local_addr(), &get(path, "")).await;
        assert_eq!(reply.status, status, "{path}: {reply:?}");
        assert_eq!(
            reply.header("x-agentguard-reason").as_deref(),
            Some(reason),
            "{path}"
        );
        assert_eq!(
            reply.header("x-agentguard-decision").as_deref(),
            Some("upstream-error")
        );
    }
    let events = s.route_events(2).await;
    let mut reasons: Vec<(&str, Decision)> = events
        .iter()
        .map(|e| (e.reason.as_str(), e.decision))
        .collect();
    reasons.sort_by_key(|r| r.0);
    assert_eq!(
        reasons,
        [
            ("encoded_response", Decision::Error),
            ("http_error", Decision::Error)
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_certificate_from_an_untrusted_ca_is_refused() {
    let s = Setup::start().await;
    let other = TestCa::new("another CA");
    let route = s.route(&["/"]).ca_pem(other.pem()).build().unwrap();
    let proxy = s.proxy(vec![route]).start().await.unwrap();
    let reply = send(proxy.local_addr(), &get("/api/echo", "")).await;
    assert_eq!(reply.status, 502, "{reply:?}");
    assert_eq!(
        reply.header("x-agentguard-reason").as_deref(),
        Some("tls_error")
    );
    assert_eq!(
        s.upstream.seen(),
        Vec::new(),
        "no request without a verified upstream"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_reaches_a_route_directly_and_through_its_proxy_variable() {
    let s = Setup::start().await;
    let proxy = s.api().await;
    let base = format!("http://127.0.0.1:{}/api", proxy.local_addr().port());
    for through_proxy in [false, true] {
        let mut curl = Command::new("curl");
        for var in CLIENT_ENV {
            curl.env_remove(var);
        }
        curl.args([
            "-sS",
            "--max-time",
            "20",
            "-H",
            "Authorization: Bearer mine",
        ]);
        if through_proxy {
            // Absolute-form: what a client sends to its HTTP_PROXY.
            curl.args(["--proxy", &base[..base.len() - 4]]);
        } else {
            curl.args(["--noproxy", "*"]);
        }
        curl.arg(format!("{base}/echo"));
        let out = tokio::task::spawn_blocking(move || curl.output().expect("curl runs"))
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{body} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            body.contains("Bearer [REDACTED]") && !body.contains("mine"),
            "{body}"
        );
        s.assert_no_secret(&[&body]);
    }
    let seen = s.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| {
        s.head
            .to_ascii_lowercase()
            .contains(&format!("bearer {}", SECRET.to_ascii_lowercase()))
    }));
}

#[test]
fn routes_are_checked_when_built() {
    let secret = || Secret::new(SECRET).unwrap();
    let header = || Credential::Header {
        name: "Authorization".into(),
        template: "Bearer {secret}".into(),
    };
    let fails = |route: agentguard_egress::RouteBuilder, want: &str| {
        let message = route.build().unwrap_err().to_string();
        assert!(message.contains(want), "{message}");
        assert!(!message.contains(SECRET), "{message}");
    };
    let base = |url: &str| Route::builder("api", url, secret()).credential(header());
    fails(base("http://api.example.test/"), "only https");
    fails(base("https://127.0.0.2/"), "names an IP address");
    fails(base("https://api.example.test/?x=1"), "query");
    fails(
        Route::builder("a/b", "https://api.example.test/", secret()).credential(header()),
        "path segment",
    );
    fails(
        Route::builder("api", "https://api.example.test/", secret()),
        "scheme = \"basic\"",
    );
    fails(base("https://api.example.test/").method("TRACE"), "TRACE");
    fails(
        base("https://api.example.test/").path("/a/../b"),
        "plain absolute path",
    );
    fails(
        base("https://api.example.test/").path("a/"),
        "plain absolute path",
    );
    let own = Credential::Header {
        name: "Host".into(),
        template: "{secret}".into(),
    };
    fails(
        Route::builder("api", "https://api.example.test/", secret()).credential(own),
        "set by the proxy",
    );
    let twice = Credential::Header {
        name: "X-Token".into(),
        template: "{secret}{secret}".into(),
    };
    fails(
        Route::builder("api", "https://api.example.test/", secret()).credential(twice),
        "exactly once",
    );
    for bad in ["", "   ", "a\nb", "tök"] {
        assert!(Secret::new(bad).is_err(), "{bad:?}");
    }
    assert_eq!(format!("{:?}", secret()), "Secret([REDACTED])");
    let route = base("https://api.example.test/v3/").build().unwrap();
    assert_eq!(
        route.describe(),
        "GET, HEAD https://api.example.test/v3/ paths /"
    );
    assert!(!format!("{route:?}").contains(SECRET));
}

/// Issue 36, item 2: an observe run forwards a route request whose method or path the route
/// refuses, with the credential, and records it as `observed`; a route the run was not
/// granted stays refused.
#[tokio::test(flavor = "multi_thread")]
async fn an_observe_run_forwards_outside_the_routes_paths_and_records_it() {
    let s = Setup::start().await;
    let proxy = s
        .proxy(vec![s.route(&["/echo"]).build().unwrap()])
        .observe(true)
        .start()
        .await
        .unwrap();
    let reply = send(proxy.local_addr(), &get("/api/other", "")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let reply = send(proxy.local_addr(), &get("/nope/x", "")).await;
    assert_eq!(reply.status, 403, "{reply:?}");
    let events = s.route_events(2).await;
    let reasons: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.subject["route"].as_str().unwrap(), e.reason.as_str()))
        .collect();
    assert!(reasons.contains(&("api", "observed")), "{reasons:?}");
    assert!(
        reasons.contains(&("nope", "route_not_allowed")),
        "{reasons:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_narrows_a_routes_paths_cuts_a_streaming_request_off() {
    let s = Setup::start().await;
    let proxy = s.api().await;
    let (mut stream, mut got) = first_event(proxy.local_addr()).await;
    // The same route without `/sse`: the open request is refused by the new rules.
    let narrower = agentguard_egress::ProxyRules {
        routes: vec![Arc::new(s.route(&["/echo"]).build().unwrap())],
        ..Default::default()
    };
    let loaded = agentguard_audit::Event::policy_loaded(
        agentguard_audit::Decision::Allow,
        "ok",
        "policy.toml",
    );
    let reloaded = proxy.reload(narrower, loaded).await.unwrap();
    assert_eq!((reloaded.generation, reloaded.revoked), (2, 1));
    let end = tokio::time::timeout(Duration::from_secs(1), stream.read_to_end(&mut got)).await;
    assert!(end.is_ok(), "the revoked request stayed open");
    assert!(!String::from_utf8_lossy(&got).contains("data: two"));
    s.upstream.release();
    let events = s.route_events(1).await;
    assert_eq!(
        (
            events[0].reason.as_str(),
            events[0].data["generation"].as_u64()
        ),
        ("policy_revoked", Some(1))
    );
}

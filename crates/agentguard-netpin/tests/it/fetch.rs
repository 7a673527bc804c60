//! Every scenario of the netpin issue, against real servers on loopback.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use agentguard_audit::{Decision, Kind};
use agentguard_netpin::{FetchError, PinError};
use agentguard_policy::Reason;
use agentguard_test_support::{RecordingListener, TestCa, TlsUpstream};

use crate::{BAD, GOOD, Net};

fn denied(result: Result<agentguard_netpin::Response, FetchError>) -> Reason {
    match result {
        Err(FetchError::Denied(denial)) => denial.reason,
        other => panic!("expected a policy denial, got {other:?}"),
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn a_name_answering_the_allowed_address_is_fetched_with_the_right_sni() {
    let net = Net::start().await;
    net.dns.answer("pkgs.example.test", &[GOOD]);
    let fetcher = net.fetcher(&["pkgs.example.test"]).build().unwrap();
    let response = fetcher
        .get(&net.url("PKGS.example.test.", "/simple/"))
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(&response.body[..], b"hello from 127.0.0.2\n");
    assert_eq!(response.dialed, SocketAddr::new(GOOD, net.port()));
    let seen = net.good.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].sni.as_deref(), Some("pkgs.example.test"));
    assert!(
        seen[0].head.starts_with("GET /simple/ HTTP/1.1\r\n"),
        "{}",
        seen[0].head
    );
    assert!(
        seen[0]
            .head
            .to_ascii_lowercase()
            .contains(&format!("host: pkgs.example.test:{}", net.port())),
        "{}",
        seen[0].head
    );
    assert_eq!(net.connections().1, 0);
}

#[tokio::test]
async fn dns_rebinding_cannot_redirect_the_request() {
    let net = Net::start().await;
    net.dns.rebind("rebind.example.test", &[GOOD], &[BAD]);
    let fetcher = net.fetcher(&["*.example.test"]).build().unwrap();
    let response = fetcher
        .get(&net.url("rebind.example.test", "/"))
        .await
        .unwrap();
    assert_eq!(
        response.dialed.ip(),
        GOOD,
        "the request landed on the checked address"
    );
    assert_eq!(&response.body[..], b"hello from 127.0.0.2\n");
    assert_eq!(
        sorted(net.dns.queries("rebind.example.test")),
        ["A", "AAAA"],
        "exactly one query per record type"
    );
    assert_eq!(net.connections(), (1, 0));
    // The next request sees the rebound answer, and it is checked too.
    let again = fetcher.get(&net.url("rebind.example.test", "/")).await;
    assert_eq!(denied(again), Reason::NonPublicAddress);
    assert_eq!(net.connections(), (1, 0), "127.0.0.3 was never dialed");
}

#[tokio::test]
async fn mixed_answers_are_refused_and_nothing_is_dialed() {
    let net = Net::start().await;
    net.dns.answer("mixed.example.test", &[GOOD, BAD]);
    let fetcher = net.fetcher(&["*.example.test"]).build().unwrap();
    let err = fetcher
        .get(&net.url("mixed.example.test", "/"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("127.0.0.3") && err.to_string().contains("loopback"),
        "{err}"
    );
    assert!(matches!(err, FetchError::Denied(ref d) if d.reason == Reason::NonPublicAddress));
    assert_eq!(net.connections(), (0, 0));
}

#[tokio::test]
async fn an_aaaa_only_ipv4_mapped_answer_is_refused() {
    let net = Net::start().await;
    let mapped: IpAddr = "::ffff:127.0.0.3".parse().unwrap();
    net.dns.answer("mapped.example.test", &[mapped]);
    let fetcher = net.fetcher(&["*.example.test"]).build().unwrap();
    let err = fetcher
        .get(&net.url("mapped.example.test", "/"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("IPv4-mapped"), "{err}");
    assert_eq!(err.reason(), "non_public_address");
    assert_eq!(net.connections(), (0, 0));
}

#[tokio::test]
async fn nxdomain_is_refused() {
    let net = Net::start().await;
    net.dns.nxdomain("gone.example.test");
    let fetcher = net.fetcher(&["*.example.test"]).build().unwrap();
    let err = fetcher
        .get(&net.url("gone.example.test", "/"))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "dns_failure", "{err}");
    assert!(!net.dns.queries("gone.example.test").is_empty());
    assert_eq!(net.connections(), (0, 0));
}

#[tokio::test]
async fn a_name_outside_the_allowlist_costs_zero_dns_queries() {
    let net = Net::start().await;
    net.dns.answer("evil.example.test", &[GOOD]);
    let fetcher = net.fetcher(&["pkgs.example.test"]).build().unwrap();
    assert_eq!(
        denied(fetcher.get(&net.url("evil.example.test", "/")).await),
        Reason::DomainNotAllowed
    );
    assert_eq!(
        denied(
            fetcher
                .get(&format!("https://pkgs.example.test:{}/", net.port() - 1))
                .await
        ),
        Reason::PortNotAllowed
    );
    assert_eq!(net.dns.total_queries(), 0);
    assert_eq!(net.connections(), (0, 0));
}

#[tokio::test]
async fn redirects_are_refused_naming_the_location() {
    let net = Net::start().await;
    net.dns.answer("pkgs.example.test", &[GOOD]);
    let fetcher = net.fetcher(&["pkgs.example.test"]).build().unwrap();
    match fetcher
        .get(&net.url("pkgs.example.test", "/redirect"))
        .await
    {
        Err(FetchError::Redirect { status, location }) => {
            assert_eq!(status, 302);
            assert_eq!(location, "https://elsewhere.example.test/next");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_over_size_body_is_an_error_not_a_truncation() {
    let net = Net::start().await;
    net.dns.answer("pkgs.example.test", &[GOOD]);
    let fetcher = net
        .fetcher(&["pkgs.example.test"])
        .max_bytes(1000)
        .build()
        .unwrap();
    assert_eq!(
        fetcher
            .get(&net.url("pkgs.example.test", "/big/1000"))
            .await
            .unwrap()
            .body
            .len(),
        1000
    );
    let declared = fetcher
        .get(&net.url("pkgs.example.test", "/big/1001"))
        .await
        .unwrap_err();
    assert!(
        matches!(declared, FetchError::BodyTooLarge { limit: 1000 }),
        "{declared:?}"
    );
    let streamed = fetcher
        .get(&net.url("pkgs.example.test", "/stream/50000"))
        .await
        .unwrap_err();
    assert!(
        matches!(streamed, FetchError::BodyTooLarge { limit: 1000 }),
        "chunked, no length: {streamed:?}"
    );
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let net = Net::start().await;
    let other = TlsUpstream::start(GOOD, 0, net.ca.server_config(&["other.example.org"])).await;
    net.dns.answer("pkgs.example.test", &[GOOD]);
    let fetcher = net
        .fetcher_with(&["pkgs.example.test"], &[other.addr().port()])
        .build()
        .unwrap();
    let err = fetcher
        .get(&format!(
            "https://pkgs.example.test:{}/",
            other.addr().port()
        ))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "tls_error", "{err}");
    assert!(
        agentguard_audit::error_chain(&err)
            .to_lowercase()
            .contains("certificate"),
        "{err}"
    );
    assert!(other.seen().is_empty(), "no request was sent");
}

#[tokio::test]
async fn an_untrusted_ca_is_refused() {
    let net = Net::start().await;
    let stranger = TestCa::new("some other CA");
    let other = TlsUpstream::start(GOOD, 0, stranger.server_config(&["pkgs.example.test"])).await;
    net.dns.answer("pkgs.example.test", &[GOOD]);
    let fetcher = net
        .fetcher_with(&["pkgs.example.test"], &[other.addr().port()])
        .build()
        .unwrap();
    let err = fetcher
        .get(&format!(
            "https://pkgs.example.test:{}/",
            other.addr().port()
        ))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "tls_error", "{err}");
    assert!(other.seen().is_empty());
}

#[tokio::test]
async fn http_and_userinfo_are_refused_before_any_query() {
    let net = Net::start().await;
    let fetcher = net.fetcher(&["*"]).build().unwrap();
    for url in [
        format!("http://pkgs.example.test:{}/", net.port()),
        format!("https://user@pkgs.example.test:{}/", net.port()),
        format!("https://user:secret@pkgs.example.test:{}/", net.port()),
    ] {
        let err = fetcher.get(&url).await.unwrap_err();
        assert_eq!(err.reason(), "invalid_url", "{url}: {err}");
    }
    assert_eq!(net.dns.total_queries(), 0);
    assert_eq!(net.connections(), (0, 0));
}

#[tokio::test]
async fn loopback_literal_forms_are_refused_without_dialing_even_with_allow_star() {
    let net = Net::start().await;
    let listener = RecordingListener::start().await;
    let port = listener.addr().port();
    let fetcher = net.fetcher_with(&["*"], &[port]).build().unwrap();
    for host in [
        "127.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "0x7f.1",
        "0x7f000001",
        "127.1",
        "127.0.1",
        "017700000001",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[0:0:0:0:0:ffff:127.0.0.1]",
    ] {
        let result = fetcher.get(&format!("https://{host}:{port}/")).await;
        match result {
            Err(FetchError::Denied(d)) => {
                assert_eq!(d.reason, Reason::NonPublicAddress, "{host}");
                assert!(d.message.contains("loopback"), "{host}: {d}");
            }
            other => panic!("{host}: {other:?}"),
        }
    }
    assert_eq!(listener.connections(), 0, "nothing dialed");
    assert_eq!(net.dns.total_queries(), 0, "literals never reach DNS");
}

#[tokio::test]
async fn too_many_answers_refuse_the_name() {
    let net = Net::start().await;
    let many: Vec<IpAddr> = (1..=40).map(|i| IpAddr::from([127, 0, 0, i])).collect();
    net.dns.answer("many.example.test", &many);
    let fetcher = net
        .fetcher(&["*.example.test"])
        .max_answers(32)
        .build()
        .unwrap();
    let err = fetcher
        .get(&net.url("many.example.test", "/"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            FetchError::Pin(PinError::TooManyAnswers {
                count: 40,
                limit: 32,
                ..
            })
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn every_outcome_is_audited() {
    let net = Net::start().await;
    net.dns.answer("pkgs.example.test", &[GOOD]);
    let fetcher = net.fetcher(&["pkgs.example.test"]).build().unwrap();
    fetcher
        .get(&net.url("pkgs.example.test", "/"))
        .await
        .unwrap();
    fetcher
        .get(&net.url("evil.example.test", "/"))
        .await
        .unwrap_err();
    fetcher
        .get(&net.url("pkgs.example.test", "/redirect"))
        .await
        .unwrap_err();
    let records = net.audit.records();
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.kind == Kind::Fetch));
    assert_eq!(
        (records[0].decision, records[0].reason.as_str()),
        (Decision::Allow, "ok")
    );
    assert_eq!(
        records[0].data["dialed"],
        format!("127.0.0.2:{}", net.port())
    );
    assert_eq!(records[0].data["status"], 200);
    assert_eq!(
        records[0].data["rule"], "pkgs.example.test",
        "the allowlist pattern that matched is recorded"
    );
    assert_eq!(records[0].subject["url"], net.url("pkgs.example.test", "/"));
    assert_eq!(
        (records[1].decision, records[1].reason.as_str()),
        (Decision::Deny, "domain_not_allowed")
    );
    assert_eq!(
        (records[2].decision, records[2].reason.as_str()),
        (Decision::Deny, "redirect_refused")
    );
    let log = net.audit.lines().concat();
    agentguard_audit::verify(log.as_bytes(), None).unwrap();
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    let net = Net::start().await;
    net.dns.answer("pkgs.example.test", &[GOOD]);
    // A port where nothing listens on 127.0.0.2.
    let closed = std::net::TcpListener::bind((GOOD, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fetcher = net
        .fetcher_with(&["pkgs.example.test"], &[closed])
        .build()
        .unwrap();
    let err = fetcher
        .get(&format!("https://pkgs.example.test:{closed}/"))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "connect_failed", "{err}");
}

#[tokio::test]
async fn building_refuses_bad_configuration() {
    let net = Net::start().await;
    assert!(
        agentguard_policy::TargetPolicy::builder().build().is_err(),
        "an empty allowlist"
    );
    assert!(
        agentguard_netpin::Fetcher::builder().build().is_err(),
        "no policy at all"
    );
    assert!(
        net.fetcher(&["*.example.test"])
            .extra_roots_pem("not pem")
            .build()
            .is_err()
    );
    let no_roots = agentguard_netpin::Fetcher::builder()
        .policy(
            agentguard_policy::TargetPolicy::builder()
                .allow("pkgs.example.test")
                .build()
                .unwrap(),
        )
        .bundled_roots(false)
        .resolver(Arc::new(
            agentguard_netpin::DnsResolver::with_nameservers(&[net.dns.addr()]).unwrap(),
        ))
        .build();
    assert!(no_roots.is_err(), "no trust roots at all");
}

//! Every status and reason code, and the DNS attacks, with their audit events.

use std::net::{IpAddr, SocketAddr};

use agentguard_audit::{Decision, Kind};
use tokio::io::AsyncWriteExt;

use crate::{BAD, Env, GOOD, echo, send, tunnel};

#[tokio::test]
async fn every_refusal_has_its_status_reason_and_closes() {
    let env = Env::start().await;
    let proxy = env
        .proxy(&["pkgs.example.test", "*.example.test"])
        .start()
        .await
        .unwrap();
    let p = env.port();
    let cases: Vec<(String, u16, &str)> = vec![
        (
            format!(
                "GET http://pkgs.example.test:{p}/ HTTP/1.1\r\nHost: pkgs.example.test\r\n\r\n"
            ),
            405,
            "method_not_allowed",
        ),
        (
            format!("POST pkgs.example.test:{p} HTTP/1.1\r\n\r\n"),
            405,
            "method_not_allowed",
        ),
        (
            "CONNECT pkgs.example.test HTTP/1.1\r\n\r\n".into(),
            400,
            "malformed_target",
        ),
        (
            "CONNECT pkgs.example.test:99999 HTTP/1.1\r\n\r\n".into(),
            400,
            "malformed_target",
        ),
        (
            "CONNECT pkgs.example.test:0 HTTP/1.1\r\n\r\n".into(),
            400,
            "malformed_target",
        ),
        (
            format!("CONNECT user@pkgs.example.test:{p} HTTP/1.1\r\n\r\n"),
            400,
            "malformed_target",
        ),
        (
            format!("CONNECT pkgs.example.test\0:{p} HTTP/1.1\r\n\r\n"),
            400,
            "malformed_target",
        ),
        (
            format!("CONNECT pkgs%2eexample.test:{p} HTTP/1.1\r\n\r\n"),
            400,
            "malformed_target",
        ),
        (
            format!("CONNECT pkgs.example.test:{p} HTTP/9\r\n\r\n"),
            400,
            "malformed_request",
        ),
        (
            format!("CONNECT  pkgs.example.test:{p} HTTP/1.1\r\n\r\n"),
            400,
            "malformed_request",
        ),
        (
            "CONNECT pkgs.example.test:22 HTTP/1.1\r\n\r\n".into(),
            403,
            "port_not_allowed",
        ),
        (
            format!("CONNECT evil.example.org:{p} HTTP/1.1\r\n\r\n"),
            403,
            "domain_not_allowed",
        ),
        (
            format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n"),
            403,
            "ip_literal_not_allowed",
        ),
        (
            format!("CONNECT 127.0.0.3:{p} HTTP/1.1\r\n\r\n"),
            403,
            "non_public_address",
        ),
        (
            format!("CONNECT 2130706433:{p} HTTP/1.1\r\n\r\n"),
            403,
            "non_public_address",
        ),
        (
            format!("CONNECT [::1]:{p} HTTP/1.1\r\n\r\n"),
            403,
            "non_public_address",
        ),
        (
            format!("CONNECT [::ffff:127.0.0.2]:{p} HTTP/1.1\r\n\r\n"),
            403,
            "ip_literal_not_allowed",
        ),
        (
            format!("CONNECT 8.8.8.8:{p} HTTP/1.1\r\n\r\n"),
            403,
            "ip_literal_not_allowed",
        ),
    ];
    for (request, status, reason) in &cases {
        let reply = send(proxy.local_addr(), request.as_bytes()).await;
        assert_eq!(reply.status, *status, "{request:?}: {reply:?}");
        assert_eq!(
            reply.header("X-AgentGuard-Reason").as_deref(),
            Some(*reason),
            "{request:?}: {reply:?}"
        );
        assert_eq!(reply.header("Connection").as_deref(), Some("close"));
        assert!(
            reply.body.starts_with(&format!("{status} {reason}: ")),
            "{:?}",
            reply.body
        );
        assert!(
            reply.body.contains("policy decision"),
            "a refusal says it is a policy decision: {:?}",
            reply.body
        );
        if *status == 405 {
            assert_eq!(reply.header("Allow").as_deref(), Some("CONNECT"));
        }
    }
    assert_eq!(
        env.dns.total_queries(),
        0,
        "no refusal above needed a DNS query"
    );
    let records = env.audit.records();
    assert_eq!(records.len(), cases.len(), "one decision event per request");
    for (record, (_, status, reason)) in records.iter().zip(&cases) {
        assert_eq!(
            (record.kind, record.decision, record.reason.as_str()),
            (Kind::EgressConnect, Decision::Deny, *reason)
        );
        assert_eq!(record.data["status"], *status);
    }
    assert_eq!(
        records[11].subject["target"],
        format!("evil.example.org:{p}")
    );
}

#[tokio::test]
async fn an_allowed_name_is_tunneled_to_the_checked_address_and_audited() {
    let env = Env::start().await;
    let proxy = env.proxy(&["pkgs.example.test"]).start().await.unwrap();
    let p = env.port();
    let mut stream = tunnel(proxy.local_addr(), &format!("PKGS.Example.Test.:{p}")).await;
    assert_eq!(
        echo(&mut stream, b"hello through the tunnel").await,
        b"hello through the tunnel"
    );
    drop(stream);
    let shutdown = proxy.shutdown(std::time::Duration::from_secs(5)).await;
    assert!(shutdown.drained);
    let records = env.audit.records();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(
        (records[0].kind, records[0].decision),
        (Kind::EgressConnect, Decision::Allow)
    );
    assert_eq!(
        records[0].subject["target"],
        format!("pkgs.example.test:{p}"),
        "the canonical target is what is logged"
    );
    assert_eq!(
        records[0].data["rule"], "pkgs.example.test",
        "the allowlist pattern that matched is recorded"
    );
    assert_eq!(
        records[0].data["addresses"],
        serde_json::json!(["127.0.0.2"]),
        "the checked addresses are recorded with the decision, before the dial"
    );
    assert_eq!(records[1].kind, Kind::EgressClose);
    assert_eq!(records[1].data["dialed"], format!("127.0.0.2:{p}"));
    assert_eq!(records[1].data["bytes_up"], 24);
    assert_eq!(records[1].data["bytes_down"], 24);
    assert_eq!(records[1].reason, "closed");
    agentguard_audit::verify(env.audit.lines().concat().as_bytes(), None).unwrap();
}

#[tokio::test]
async fn bytes_sent_after_the_head_are_forwarded() {
    let env = Env::start().await;
    let proxy = env.proxy(&["pkgs.example.test"]).start().await.unwrap();
    let mut stream = tokio::net::TcpStream::connect(proxy.local_addr())
        .await
        .unwrap();
    let p = env.port();
    stream
        .write_all(format!("CONNECT pkgs.example.test:{p} HTTP/1.1\r\n\r\nearly bytes").as_bytes())
        .await
        .unwrap();
    let mut all = Vec::new();
    while !all.ends_with(b"early bytes") {
        let mut buf = [0u8; 256];
        let n = tokio::io::AsyncReadExt::read(&mut stream, &mut buf)
            .await
            .unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&all));
        all.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        all,
        b"HTTP/1.1 200 Connection Established\r\n\r\nearly bytes"
    );
}

#[tokio::test]
async fn wildcard_matches_subdomains_but_not_the_apex() {
    let env = Env::start().await;
    let proxy = env.proxy(&["*.example.test"]).start().await.unwrap();
    let p = env.port();
    let mut sub = tunnel(proxy.local_addr(), &format!("a.b.example.test:{p}")).await;
    assert_eq!(echo(&mut sub, b"x").await, b"x");
    let apex = send(
        proxy.local_addr(),
        format!("CONNECT example.test:{p} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        (apex.status, apex.header("X-AgentGuard-Reason").as_deref()),
        (403, Some("domain_not_allowed"))
    );
    assert!(
        env.dns.queries("example.test").is_empty(),
        "the refused apex cost no query"
    );
}

#[tokio::test]
async fn dns_rebinding_mixed_answers_and_mapped_addresses_are_refused() {
    let env = Env::start().await;
    let mapped: IpAddr = "::ffff:127.0.0.3".parse().unwrap();
    env.dns.rebind("rebind.example.test", &[GOOD], &[BAD]);
    env.dns.answer("mixed.example.test", &[GOOD, BAD]);
    env.dns.answer("mapped.example.test", &[mapped]);
    env.dns.nxdomain("gone.example.test");
    let proxy = env.proxy(&["*.example.test"]).start().await.unwrap();
    let p = env.port();

    let mut first = tunnel(proxy.local_addr(), &format!("rebind.example.test:{p}")).await;
    assert_eq!(echo(&mut first, b"1").await, b"1");
    let second = send(
        proxy.local_addr(),
        format!("CONNECT rebind.example.test:{p} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        (
            second.status,
            second.header("X-AgentGuard-Reason").as_deref()
        ),
        (403, Some("non_public_address"))
    );
    // The client learns the reason and the rule, never what the name resolved to: the proxy
    // is no DNS oracle. The audit log has the addresses.
    assert!(!second.body.contains("127.0.0.3"), "{}", second.body);
    let refusal = env
        .audit
        .records()
        .into_iter()
        .rfind(|r| r.reason == "non_public_address")
        .unwrap();
    assert!(
        refusal.data["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.3"),
        "{refusal:?}"
    );

    for (name, status, reason) in [
        ("mixed", 403, "non_public_address"),
        ("mapped", 403, "non_public_address"),
        ("gone", 502, "dns_failure"),
    ] {
        let reply = send(
            proxy.local_addr(),
            format!("CONNECT {name}.example.test:{p} HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(
            (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
            (status, Some(reason)),
            "{name}: {reply:?}"
        );
        if status == 502 {
            assert!(
                reply.body.contains("not a policy decision"),
                "{}",
                reply.body
            );
            assert_eq!(
                reply.header("X-AgentGuard-Decision").as_deref(),
                Some("upstream-error")
            );
        }
    }
    let records = env.audit.records();
    let dialed: Vec<_> = records
        .iter()
        .filter_map(|r| r.data.get("dialed"))
        .collect();
    assert!(
        dialed.iter().all(|d| *d == &format!("127.0.0.2:{p}")),
        "127.0.0.3 was never dialed: {dialed:?}"
    );
    assert!(
        records
            .iter()
            .any(|r| r.reason == "dns_failure" && r.decision == Decision::Error)
    );
}

#[tokio::test]
async fn a_refused_dial_is_502() {
    let env = Env::start().await;
    let closed = std::net::TcpListener::bind((GOOD, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let proxy = env
        .proxy_for(env.policy(&["pkgs.example.test"]).allow_port(closed))
        .start()
        .await
        .unwrap();
    let reply = send(
        proxy.local_addr(),
        format!("CONNECT pkgs.example.test:{closed} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
        (502, Some("connect_failed")),
        "{reply:?}"
    );
}

#[tokio::test]
async fn a_dial_timeout_is_504() {
    let env = Env::start().await;
    // A listener with a backlog of 0 that never accepts: once its queue is full, the kernel
    // drops further SYNs on loopback, so the next dial hangs until the proxy's timeout.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(GOOD, 0)).unwrap();
    let listener = socket.listen(0).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            tokio::net::TcpStream::connect((GOOD, port)),
        )
        .await
        {
            fillers.push(s);
        }
    }
    let proxy = env
        .proxy_for(env.policy(&["pkgs.example.test"]).allow_port(port))
        .connect_timeout(std::time::Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let reply = send(
        proxy.local_addr(),
        format!("CONNECT pkgs.example.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
        (504, Some("dial_timeout")),
        "{reply:?}"
    );
    drop(listener);
}

#[tokio::test]
async fn the_proxy_never_tunnels_to_itself() {
    let env = Env::start().await;
    // Allow all of loopback, and point a name at the proxy's own address.
    let own = std::net::TcpListener::bind((GOOD, 0))
        .unwrap()
        .local_addr()
        .unwrap();
    env.dns.answer("self.example.test", &[own.ip()]);
    let proxy = env
        .proxy_for(
            env.policy(&["self.example.test"])
                .allow_cidr(agentguard_policy::parse_cidr("127.0.0.0/8").unwrap())
                .allow_port(own.port()),
        )
        .bind(own)
        .start()
        .await
        .unwrap();
    let reply = send(
        own,
        format!("CONNECT self.example.test:{} HTTP/1.1\r\n\r\n", own.port()).as_bytes(),
    )
    .await;
    assert_eq!(
        (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
        (403, Some("non_public_address")),
        "{reply:?}"
    );
    assert!(reply.body.contains("own listening address"));
    drop(proxy);
}

#[tokio::test]
async fn starting_needs_an_allowlist() {
    let env = Env::start().await;
    let err = env.proxy(&[]).start().await.err().unwrap();
    assert!(
        err.to_string().contains("never means \"allow everything\""),
        "{err}"
    );
}

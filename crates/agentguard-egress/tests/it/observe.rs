//! An observe run's proxy (issue 36, item 2): a name or port the policy refuses is let
//! through when every address is public (here: inside the operator's `allow_cidrs`), and
//! recorded as an allow with reason `observed`; a name resolving elsewhere, an IP literal and
//! malformed requests stay refused; the address check is never relaxed.

use std::time::Duration;

use agentguard_audit::Kind;

use crate::{BAD, Env, GOOD, echo, send, tunnel, wait_for};

#[tokio::test(flavor = "multi_thread")]
async fn observe_lets_public_targets_through_and_records_them() {
    let env = Env::start().await;
    env.dns.answer("files.example.test", &[GOOD]);
    env.dns.answer("internal.example.test", &[BAD]);
    let proxy = env
        .proxy(&["pkgs.example.test"])
        .observe(true)
        .start()
        .await
        .unwrap();
    let addr = proxy.local_addr();
    let port = env.port();
    // The listed host: an ordinary allow.
    let mut listed = tunnel(addr, &format!("pkgs.example.test:{port}")).await;
    assert_eq!(echo(&mut listed, b"one").await, b"one");
    // A host off the list whose addresses pass: let through, observed.
    let mut observed = tunnel(addr, &format!("files.example.test:{port}")).await;
    assert_eq!(echo(&mut observed, b"two").await, b"two");
    drop((listed, observed));
    // Off the list and resolving to an address the policy refuses: still refused.
    let reply = send(
        addr,
        format!("CONNECT internal.example.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        (reply.status, reply.header("x-agentguard-reason").as_deref()),
        (403, Some("non_public_address")),
        "{reply:?}"
    );
    // An IP literal is never observed.
    let reply = send(
        addr,
        format!("CONNECT 127.0.0.2:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 403, "{reply:?}");
    wait_for(&env.audit, Kind::EgressClose, Duration::from_secs(10)).await;
    let connects: Vec<(String, String, String)> = env
        .audit
        .records()
        .into_iter()
        .filter(|r| r.kind == Kind::EgressConnect)
        .map(|r| {
            (
                r.subject["target"].as_str().unwrap().to_owned(),
                r.decision.as_str().to_owned(),
                r.reason,
            )
        })
        .collect();
    let has = |target: String, decision: &str, reason: &str| {
        connects
            .iter()
            .any(|c| c.0 == target && c.1 == decision && c.2 == reason)
    };
    assert!(
        has(format!("pkgs.example.test:{port}"), "allow", "ok"),
        "{connects:?}"
    );
    assert!(
        has(format!("files.example.test:{port}"), "allow", "observed"),
        "{connects:?}"
    );
    assert!(
        has(
            format!("internal.example.test:{port}"),
            "deny",
            "non_public_address"
        ),
        "{connects:?}"
    );
    assert!(
        has(
            format!("127.0.0.2:{port}"),
            "deny",
            "ip_literal_not_allowed"
        ),
        "{connects:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_observe_the_same_target_is_refused() {
    let env = Env::start().await;
    env.dns.answer("files.example.test", &[GOOD]);
    let proxy = env.proxy(&["pkgs.example.test"]).start().await.unwrap();
    let reply = send(
        proxy.local_addr(),
        format!("CONNECT files.example.test:{} HTTP/1.1\r\n\r\n", env.port()).as_bytes(),
    )
    .await;
    assert_eq!(
        reply.header("x-agentguard-reason").as_deref(),
        Some("domain_not_allowed")
    );
}

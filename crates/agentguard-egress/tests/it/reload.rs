//! Live rules (issue 40, item 1): a reload puts a new generation in place, records it first,
//! stamps every later decision with it, and closes exactly the open tunnels the new rules
//! refuse (`policy_revoked`) while the others carry on; rules that do not build leave the old
//! generation in place.

use std::time::Duration;

use agentguard_audit::{Decision, Event, Kind};
use agentguard_egress::ProxyRules;
use tokio::io::AsyncReadExt;

use crate::{Env, echo, send, tunnel, wait_for};

fn loaded() -> Event {
    Event::policy_loaded(Decision::Allow, "ok", "policy.toml")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_narrowing_reload_revokes_exactly_the_tunnels_it_refuses() {
    let env = Env::start().await;
    let proxy = env
        .proxy(&["pkgs.example.test", "example.test"])
        .loaded(loaded())
        .start()
        .await
        .unwrap();
    let (addr, port) = (proxy.local_addr(), env.port());
    assert_eq!(proxy.generation(), 1);
    let mut kept = tunnel(addr, &format!("pkgs.example.test:{port}")).await;
    let mut cut = tunnel(addr, &format!("example.test:{port}")).await;
    assert_eq!(echo(&mut kept, b"one").await, b"one");
    assert_eq!(echo(&mut cut, b"two").await, b"two");

    let narrower = ProxyRules {
        policy: Some(env.policy(&["pkgs.example.test"]).build().unwrap()),
        ..ProxyRules::default()
    };
    let reloaded = proxy.reload(narrower, loaded()).await.unwrap();
    assert_eq!((reloaded.generation, reloaded.revoked), (2, 1));
    assert_eq!(proxy.generation(), 2);

    // The refused tunnel is closed by the proxy; the other still carries bytes both ways.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(1), cut.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "the revoked tunnel stayed open: {read:?}"
    );
    assert_eq!(echo(&mut kept, b"three").await, b"three");
    let close = wait_for(&env.audit, Kind::EgressClose, Duration::from_secs(5)).await;
    assert_eq!(
        (close.reason.as_str(), close.subject["target"].as_str()),
        (
            "policy_revoked",
            Some(format!("example.test:{port}").as_str())
        )
    );

    // A new connection is decided by generation 2.
    let reply = send(
        addr,
        format!("CONNECT example.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 403, "{reply:?}");
    drop(kept);
    let records = env.audit.records();
    let generations: Vec<(Kind, String, u64)> = records
        .iter()
        .filter(|r| matches!(r.kind, Kind::EgressConnect | Kind::PolicyLoaded))
        .map(|r| {
            (
                r.kind,
                r.decision.as_str().to_owned(),
                r.data["generation"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        generations,
        [
            (Kind::PolicyLoaded, "allow".to_owned(), 1),
            (Kind::EgressConnect, "allow".to_owned(), 1),
            (Kind::EgressConnect, "allow".to_owned(), 1),
            (Kind::PolicyLoaded, "allow".to_owned(), 2),
            (Kind::EgressConnect, "deny".to_owned(), 2),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rules_that_do_not_build_leave_the_old_generation_in_place() {
    let env = Env::start().await;
    let proxy = env.proxy(&["pkgs.example.test"]).start().await.unwrap();
    let (addr, port) = (proxy.local_addr(), env.port());
    let mut open = tunnel(addr, &format!("pkgs.example.test:{port}")).await;
    let refused = proxy.reload(ProxyRules::default(), loaded()).await;
    assert!(refused.is_err(), "empty rules were put in place");
    assert_eq!(proxy.generation(), 1);
    assert_eq!(echo(&mut open, b"still").await, b"still");
    assert!(
        env.audit
            .records()
            .iter()
            .all(|r| r.kind != Kind::PolicyLoaded),
        "a refused reload was recorded as loaded"
    );
}

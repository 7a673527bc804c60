//! Limits and lifecycle: slowloris, head size, the connection cap, idle timeout, half-close,
//! graceful shutdown, and the blocking wrapper.

use std::time::{Duration, Instant};

use agentguard_audit::Kind;
use agentguard_egress::BlockingEgressProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Env, echo, parse_reply, send, tunnel};

#[tokio::test]
async fn a_slow_head_is_cut_off_with_408() {
    let env = Env::start().await;
    let proxy = env
        .proxy(&["pkgs.example.test"])
        .head_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
    stream.write_all(b"CONNECT pkgs.exa").await.unwrap();
    let start = Instant::now();
    let mut all = Vec::new();
    stream.read_to_end(&mut all).await.unwrap();
    let reply = parse_reply(&all);
    assert_eq!(
        (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
        (408, Some("head_timeout"))
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the connection was closed by the deadline"
    );
}

#[tokio::test]
async fn an_oversized_head_is_431() {
    let env = Env::start().await;
    let proxy = env
        .proxy(&["pkgs.example.test"])
        .max_head_bytes(1024)
        .start()
        .await
        .unwrap();
    let request = format!(
        "CONNECT pkgs.example.test:{} HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        env.port(),
        "a".repeat(4000)
    );
    let reply = send(proxy.local_addr(), request.as_bytes()).await;
    assert_eq!(
        (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
        (431, Some("head_too_large"))
    );
}

#[tokio::test]
async fn the_connection_cap_holds_a_slot_until_the_tunnel_closes() {
    let env = Env::start().await;
    let proxy = env
        .proxy(&["pkgs.example.test"])
        .max_connections(2)
        .start()
        .await
        .unwrap();
    let target = format!("pkgs.example.test:{}", env.port());
    let first = tunnel(proxy.local_addr(), &target).await;
    let mut second = tunnel(proxy.local_addr(), &target).await;
    let third = send(
        proxy.local_addr(),
        format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        (third.status, third.header("X-AgentGuard-Reason").as_deref()),
        (503, Some("too_many_connections"))
    );
    assert_eq!(echo(&mut second, b"still open").await, b"still open");
    drop(first);
    // The slot comes back when the first tunnel's task ends; retry until it does (bounded).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
        stream
            .write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.unwrap();
        if &head == b"HTTP/1.1 200" {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was never released");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn an_idle_tunnel_is_closed_and_the_close_recorded() {
    let env = Env::start().await;
    let proxy = env
        .proxy(&["pkgs.example.test"])
        .idle_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let mut stream = tunnel(
        proxy.local_addr(),
        &format!("pkgs.example.test:{}", env.port()),
    )
    .await;
    assert_eq!(echo(&mut stream, b"ping").await, b"ping");
    let start = Instant::now();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    assert!(
        start.elapsed() >= Duration::from_millis(250),
        "closed only after being idle"
    );
    proxy.shutdown(Duration::from_secs(5)).await;
    let close = env
        .audit
        .records()
        .into_iter()
        .find(|r| r.kind == Kind::EgressClose)
        .unwrap();
    assert_eq!(close.reason, "idle_timeout");
    assert_eq!(
        (
            close.data["bytes_up"].as_u64(),
            close.data["bytes_down"].as_u64()
        ),
        (Some(4), Some(4))
    );
}

#[tokio::test]
async fn half_close_passes_through_both_ways() {
    let env = Env::start().await;
    let proxy = env.proxy(&["pkgs.example.test"]).start().await.unwrap();
    let stream = tunnel(
        proxy.local_addr(),
        &format!("pkgs.example.test:{}", env.port()),
    )
    .await;
    let (mut read, mut write) = stream.into_split();
    let payload = vec![7u8; 300_000];
    let writer = tokio::spawn(async move {
        write.write_all(&payload).await.unwrap();
        // Our FIN must reach the echo server, whose FIN must come back after its last byte.
        write.shutdown().await.unwrap();
        write
    });
    let mut back = Vec::new();
    read.read_to_end(&mut back).await.unwrap();
    let _write = writer.await.unwrap();
    assert_eq!(
        back.len(),
        300_000,
        "every byte echoed before the FIN came back"
    );
    assert!(back.iter().all(|b| *b == 7));
    proxy.shutdown(Duration::from_secs(5)).await;
    let close = env
        .audit
        .records()
        .into_iter()
        .find(|r| r.kind == Kind::EgressClose)
        .unwrap();
    assert_eq!(close.reason, "closed");
    assert_eq!(close.data["bytes_up"], 300_000);
    assert_eq!(close.data["bytes_down"], 300_000);
}

#[tokio::test]
async fn graceful_shutdown_lets_an_open_tunnel_finish_and_refuses_new_ones() {
    let env = Env::start().await;
    let proxy = env.proxy(&["pkgs.example.test"]).start().await.unwrap();
    let addr = proxy.local_addr();
    let mut stream = tunnel(addr, &format!("pkgs.example.test:{}", env.port())).await;
    let shutdown = tokio::spawn(proxy.shutdown(Duration::from_secs(10)));
    // The listener closes promptly: a new connection is refused.
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "still accepting after shutdown began"
        );
        tokio::task::yield_now().await;
    }
    // The open tunnel still works during the grace period.
    assert_eq!(echo(&mut stream, b"during grace").await, b"during grace");
    assert!(!shutdown.is_finished());
    drop(stream);
    let result = shutdown.await.unwrap();
    assert!(
        result.drained,
        "the tunnel finished within the grace period"
    );
    let close = env
        .audit
        .records()
        .into_iter()
        .find(|r| r.kind == Kind::EgressClose)
        .unwrap();
    assert_eq!(close.reason, "closed");
}

#[tokio::test]
async fn a_tunnel_outliving_the_grace_period_is_closed_and_recorded() {
    let env = Env::start().await;
    let proxy = env.proxy(&["pkgs.example.test"]).start().await.unwrap();
    let mut stream = tunnel(
        proxy.local_addr(),
        &format!("pkgs.example.test:{}", env.port()),
    )
    .await;
    let result = proxy.shutdown(Duration::from_millis(200)).await;
    assert!(!result.drained);
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    let close = env
        .audit
        .records()
        .into_iter()
        .find(|r| r.kind == Kind::EgressClose)
        .unwrap();
    assert_eq!(close.reason, "shutdown");
}

#[test]
fn the_blocking_wrapper_starts_and_stops_without_tokio() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let env = runtime.block_on(Env::start());
    let proxy = BlockingEgressProxy::start(env.proxy(&["pkgs.example.test"])).unwrap();
    let addr = proxy.local_addr();
    // A plain blocking client, no runtime involved.
    use std::io::{Read, Write};
    let mut client = std::net::TcpStream::connect(addr).unwrap();
    write!(
        client,
        "CONNECT pkgs.example.test:{} HTTP/1.1\r\n\r\n",
        env.port()
    )
    .unwrap();
    let mut head = [0u8; 39];
    client.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    client.write_all(b"blocking").unwrap();
    let mut back = [0u8; 8];
    client.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"blocking");
    drop(client);
    let stopped = proxy.stop(Duration::from_secs(5));
    assert!(stopped.drained);
    assert!(std::net::TcpStream::connect(addr).is_err(), "stopped");
    drop(env);
}

#[tokio::test]
async fn a_large_download_arrives_complete_before_the_fin() {
    // A source that writes 64 MiB and closes at once: every byte must reach the client.
    let env = Env::start().await;
    let source = tokio::net::TcpListener::bind((crate::GOOD, 0))
        .await
        .unwrap();
    let port = source.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = source.accept().await.unwrap();
        let chunk = vec![9u8; 1 << 20];
        for _ in 0..64 {
            stream.write_all(&chunk).await.unwrap();
        }
    });
    let proxy = env
        .proxy_for(env.policy(&["pkgs.example.test"]).allow_port(port))
        .start()
        .await
        .unwrap();
    let mut stream = tunnel(proxy.local_addr(), &format!("pkgs.example.test:{port}")).await;
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    assert_eq!(total, 64 << 20, "bytes lost in the tunnel");
}

/// Every proxy of one process draws from one budget: a flood of one proxy's connections
/// takes the budget from all of them (503 `too_many_connections` at once, never a lost
/// descriptor elsewhere), and the budget comes back as the flood's connections close.
#[tokio::test]
async fn proxies_sharing_a_budget_cannot_flood_past_it_together() {
    let env = Env::start().await;
    let budget = agentguard_egress::ConnectionBudget::new(4);
    let start = |budget: &agentguard_egress::ConnectionBudget| {
        env.proxy(&["pkgs.example.test"])
            .connection_budget(budget.clone())
            .start()
    };
    let (flooded, other) = (start(&budget).await.unwrap(), start(&budget).await.unwrap());
    // Four silent clients of the first proxy hold the whole budget while their heads are read.
    let mut flood = Vec::new();
    for _ in 0..4 {
        flood.push(TcpStream::connect(flooded.local_addr()).await.unwrap());
    }
    for _ in 0..500 {
        if budget.available() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(budget.available(), 0, "the flood holds the budget");
    let request = format!("CONNECT pkgs.example.test:{} HTTP/1.1\r\n\r\n", env.port());
    let reply = send(other.local_addr(), request.as_bytes()).await;
    assert_eq!(
        (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
        (503, Some("too_many_connections")),
        "the other proxy shares the budget"
    );
    drop(flood);
    for _ in 0..500 {
        if budget.available() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(budget.available(), 4, "the slots come back");
    let target = format!("pkgs.example.test:{}", env.port());
    let mut stream = tunnel(other.local_addr(), &target).await;
    assert_eq!(echo(&mut stream, b"served again").await, b"served again");
}

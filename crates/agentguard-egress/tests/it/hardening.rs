//! The proxy under attack, load and faults: each test here failed on the proxy before the
//! hardening issue (the closing note and docs/egress.md name which defect each covers).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentguard_audit::{AuditSink, Kind};
use agentguard_policy::parse_cidr;
use agentguard_test_support::RecordingListener;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::{BlackHole, Env, GOOD, send, tunnel, wait_for};

#[tokio::test]
async fn the_proxy_never_dials_itself_in_any_spelling() {
    let env = Env::start().await;
    // Bound to 127.0.0.2 with all of loopback allowed; the name answers the mapped spelling.
    let own = std::net::TcpListener::bind((GOOD, 0))
        .unwrap()
        .local_addr()
        .unwrap();
    env.dns.answer(
        "mapped.example.test",
        &["::ffff:127.0.0.2".parse().unwrap()],
    );
    let proxy = env
        .proxy_for(
            env.policy(&["*.example.test"])
                .allow_cidr(parse_cidr("127.0.0.0/8").unwrap())
                .allow_port(own.port()),
        )
        .bind(own)
        .start()
        .await
        .unwrap();
    let reply = send(
        own,
        format!(
            "CONNECT mapped.example.test:{} HTTP/1.1\r\n\r\n",
            own.port()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
        (403, Some("non_public_address")),
        "{reply:?}"
    );
    assert!(reply.body.contains("own listening address"), "{reply:?}");
    drop(proxy);

    // Bound to the IPv4-mapped spelling of an address; the name answers the plain one.
    let mapped = std::net::TcpListener::bind("[::ffff:127.0.0.2]:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let plain = SocketAddr::new(GOOD, mapped.port());
    env.dns.answer("plain.example.test", &[GOOD]);
    let proxy = env
        .proxy_for(
            env.policy(&["*.example.test"])
                .allow_cidr(parse_cidr("127.0.0.0/8").unwrap())
                .allow_port(mapped.port()),
        )
        .bind(mapped)
        .start()
        .await
        .unwrap();
    let reply = send(
        plain,
        format!(
            "CONNECT plain.example.test:{} HTTP/1.1\r\n\r\n",
            mapped.port()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 403, "{reply:?}");
    drop(proxy);
}

#[tokio::test]
async fn the_unspecified_address_is_never_dialed_whatever_the_allow_cidrs() {
    let env = Env::start().await;
    let listener = RecordingListener::start().await;
    let port = listener.addr().port();
    env.dns
        .answer("zero.example.test", &[IpAddr::V4(Ipv4Addr::UNSPECIFIED)]);
    let proxy = env
        .proxy_for(
            env.policy(&["zero.example.test"])
                .allow_cidr(parse_cidr("0.0.0.0/0").unwrap())
                .allow_port(port),
        )
        .start()
        .await
        .unwrap();
    let reply = send(
        proxy.local_addr(),
        format!("CONNECT zero.example.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        (reply.status, reply.header("X-AgentGuard-Reason").as_deref()),
        (403, Some("non_public_address")),
        "{reply:?}"
    );
    assert_eq!(listener.connections(), 0, "0.0.0.0 reaches this host");
}

/// An upstream that sends `bytes` as fast as it can, then keeps its side open until the
/// client closes.
async fn source(bytes: usize) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind((GOOD, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let chunk = vec![7u8; 64 * 1024];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len());
            if stream.write_all(&chunk[..n]).await.is_err() {
                return;
            }
            left -= n;
        }
        let mut sink = [0u8; 1];
        let _ = stream.read(&mut sink).await;
    });
    (addr, task)
}

/// A client socket with a small receive buffer, so the proxy's writes to it are slow.
async fn slow_client(proxy: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(8 * 1024).unwrap();
    socket.connect(proxy).await.unwrap()
}

async fn connect_through(stream: &mut TcpStream, target: &str) {
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).await.unwrap(), 1);
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
}

#[tokio::test]
async fn a_tunnel_moving_bytes_to_a_slow_reader_is_never_idle() {
    let env = Env::start().await;
    const TOTAL: usize = 256 * 1024;
    let (upstream, _task) = source(TOTAL).await;
    env.dns.answer("bulk.example.test", &[GOOD]);
    let proxy = env
        .proxy_for(
            env.policy(&["bulk.example.test"])
                .allow_port(upstream.port()),
        )
        .idle_timeout(Duration::from_millis(250))
        .start()
        .await
        .unwrap();
    let mut client = slow_client(proxy.local_addr()).await;
    connect_through(
        &mut client,
        &format!("bulk.example.test:{}", upstream.port()),
    )
    .await;
    // Read 4 KiB every 50 ms, about 80 KB/s: a splice chunk of what the upstream socket holds
    // (tens of KiB and more) takes longer than the idle timeout to drain, while each write
    // of it comes within 50 ms of the last.
    let mut total = 0;
    let mut buf = vec![0u8; 4 * 1024];
    while total < TOTAL {
        tokio::time::sleep(Duration::from_millis(50)).await;
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    assert_eq!(total, TOTAL, "the tunnel was closed while moving bytes");
    drop(client);
    let close = wait_for(&env.audit, Kind::EgressClose, Duration::from_secs(10)).await;
    assert_eq!(close.data["bytes_down"], TOTAL, "{close:?}");
    // A tunnel cut by the idle timeout still delivers what the kernel had queued, so the
    // count alone cannot tell: it ended because the client closed.
    assert_eq!(close.reason, "closed", "{close:?}");
}

#[tokio::test]
async fn the_close_event_counts_exactly_the_bytes_written_even_mid_chunk() {
    let env = Env::start().await;
    let (upstream, _task) = source(8 * 1024 * 1024).await;
    env.dns.answer("bulk.example.test", &[GOOD]);
    let proxy = env
        .proxy_for(
            env.policy(&["bulk.example.test"])
                .allow_port(upstream.port()),
        )
        .start()
        .await
        .unwrap();
    let mut client = slow_client(proxy.local_addr()).await;
    connect_through(
        &mut client,
        &format!("bulk.example.test:{}", upstream.port()),
    )
    .await;
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0;
    while total < 256 * 1024 {
        total += client.read(&mut buf).await.unwrap();
    }
    // Cut the tunnel in the middle of a splice chunk, then read what reached the socket.
    let reader = tokio::spawn(async move {
        let mut total = total;
        while let Ok(n) = client.read(&mut buf).await {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    proxy.shutdown(Duration::ZERO).await;
    let received = reader.await.unwrap();
    let close = env
        .audit
        .records()
        .into_iter()
        .find(|r| r.kind == Kind::EgressClose)
        .unwrap();
    assert_eq!(close.reason, "shutdown");
    assert_eq!(close.data["bytes_down"], received as u64, "{close:?}");
}

#[tokio::test]
async fn one_deadline_bounds_the_dial_across_every_address() {
    let env = Env::start().await;
    // Three addresses on one port, each a black hole.
    let (holes, port) = loop {
        let first = BlackHole::start(GOOD, 0).await.unwrap();
        let port = first.port;
        let others = [
            BlackHole::start(IpAddr::from([127, 0, 0, 4]), port).await,
            BlackHole::start(IpAddr::from([127, 0, 0, 5]), port).await,
        ];
        if let [Ok(b), Ok(c)] = others {
            break (vec![first, b, c], port);
        }
    };
    let addresses: Vec<IpAddr> = ["127.0.0.2", "127.0.0.4", "127.0.0.5"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    env.dns.answer("holes.example.test", &addresses);
    let proxy = env
        .proxy_for(
            env.policy(&["holes.example.test"])
                .allow_cidr(parse_cidr("127.0.0.0/8").unwrap())
                .allow_port(port),
        )
        .connect_timeout(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let reply = send(
        proxy.local_addr(),
        format!("CONNECT holes.example.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(reply.status, 504, "{reply:?}");
    // Before, each address had the whole timeout: 3 s for three.
    assert!(took < Duration::from_millis(2500), "the dial took {took:?}");
    drop(holes);
}

/// A sink whose every `record` fails.
struct FailingSink;

impl AuditSink for FailingSink {
    fn record(
        &self,
        _: agentguard_audit::Event,
    ) -> agentguard_audit::Result<agentguard_audit::Receipt> {
        Err(agentguard_audit::Error::EventTooLarge { bytes: 0, limit: 0 })
    }
}

#[tokio::test]
async fn nothing_is_dialed_unless_the_decision_is_recorded_first() {
    let env = Env::start().await;
    let listener = RecordingListener::start().await;
    let port = listener.addr().port();
    env.dns
        .answer("pkgs.example.test", &[IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let proxy = env
        .proxy_for(
            env.policy(&["pkgs.example.test"])
                .allow_cidr(parse_cidr("127.0.0.1/32").unwrap())
                .allow_port(port),
        )
        .audit(Arc::new(FailingSink))
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
        (503, Some("audit_failed")),
        "{reply:?}"
    );
    assert_eq!(listener.connections(), 0, "the upstream was never dialed");
}

#[tokio::test]
async fn an_allowed_decision_has_its_close_event_when_the_client_is_gone_before_the_200() {
    let env = Env::start().await;
    env.dns
        .answer_after("slow.example.test", &[GOOD], Duration::from_millis(400));
    let proxy = env.proxy(&["slow.example.test"]).start().await.unwrap();
    let stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let mut stream = stream;
    stream
        .write_all(format!("CONNECT slow.example.test:{} HTTP/1.1\r\n\r\n", env.port()).as_bytes())
        .await
        .unwrap();
    // Gone with a reset, while the proxy still waits for DNS.
    rustix::net::sockopt::set_socket_linger(&stream, Some(Duration::ZERO)).unwrap();
    drop(stream);
    let close = wait_for(&env.audit, Kind::EgressClose, Duration::from_secs(10)).await;
    let records = env.audit.records();
    assert_eq!(records[0].kind, Kind::EgressConnect);
    assert_eq!(records[0].reason, "ok");
    assert!(
        ["client_gone", "connection_error", "closed"].contains(&close.reason.as_str()),
        "{close:?}"
    );
}

#[tokio::test]
async fn a_half_closed_tunnel_whose_other_side_is_silent_is_released() {
    let env = Env::start().await;
    // An upstream that reads and never writes nor closes.
    let silent = TcpListener::bind((GOOD, 0)).await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let _task = tokio::spawn(async move {
        let (mut stream, _) = silent.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                std::future::pending::<()>().await;
            }
        }
    });
    let proxy = env
        .proxy_for(env.policy(&["pkgs.example.test"]).allow_port(port))
        .half_close_timeout(Duration::from_millis(300))
        .idle_timeout(Duration::from_secs(120))
        .start()
        .await
        .unwrap();
    let mut stream = tunnel(proxy.local_addr(), &format!("pkgs.example.test:{port}")).await;
    stream.write_all(b"request").await.unwrap();
    stream.shutdown().await.unwrap();
    let close = wait_for(&env.audit, Kind::EgressClose, Duration::from_secs(10)).await;
    assert_eq!(close.reason, "half_close_timeout", "{close:?}");
    assert_eq!(close.data["bytes_up"], 7);
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
}

#[tokio::test]
async fn shutdown_ends_connections_reading_their_head_resolving_or_dialing_within_the_grace() {
    let env = Env::start().await;
    env.dns.silent("stalled.example.test");
    let hole = BlackHole::start(GOOD, 0).await.unwrap();
    let proxy = env
        .proxy_for(env.policy(&["*.example.test"]).allow_port(hole.port))
        .head_timeout(Duration::from_secs(60))
        .connect_timeout(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let addr = proxy.local_addr();
    let mut slowloris = TcpStream::connect(addr).await.unwrap();
    slowloris.write_all(b"CONNECT pkgs.exa").await.unwrap();
    let mut resolving = TcpStream::connect(addr).await.unwrap();
    resolving
        .write_all(
            format!(
                "CONNECT stalled.example.test:{} HTTP/1.1\r\n\r\n",
                hole.port
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut dialing = TcpStream::connect(addr).await.unwrap();
    dialing
        .write_all(format!("CONNECT pkgs.example.test:{} HTTP/1.1\r\n\r\n", hole.port).as_bytes())
        .await
        .unwrap();
    // Let each reach its stage.
    let _ = tokio::time::timeout(Duration::from_millis(300), std::future::pending::<()>()).await;
    let started = Instant::now();
    let shutdown = proxy.shutdown(Duration::from_millis(200)).await;
    let took = started.elapsed();
    assert!(!shutdown.drained);
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
}

/// Issue 34, item 10: a CONNECT whose name is with the resolver when the proxy stops still
/// leaves exactly one event (the name may carry data to an allowed wildcard's DNS).
#[tokio::test(flavor = "multi_thread")]
async fn r34_10_a_lookup_in_flight_at_shutdown_is_recorded() {
    let env = Env::start().await;
    env.dns.silent("data-in-the-name.example.test");
    let proxy = env.proxy(&["*.example.test"]).start().await.unwrap();
    let addr = proxy.local_addr();
    let target = format!("data-in-the-name.example.test:{}", env.port());
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    agentguard_test_support::eventually(
        "the query reaches the resolver",
        Duration::from_secs(10),
        || (!env.dns.queries("data-in-the-name.example.test").is_empty()).then_some(()),
    )
    .await;
    proxy.shutdown(Duration::ZERO).await;
    let events: Vec<_> = env
        .audit
        .records()
        .into_iter()
        .filter(|r| r.kind == Kind::EgressConnect)
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].subject["target"], target.as_str());
    assert_eq!(events[0].reason, "shutting_down");
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut reply)).await;
    assert!(
        String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 503 "),
        "{}",
        String::from_utf8_lossy(&reply)
    );
}

//! The dial's overall deadline, against listeners on this machine whose accept queue is full
//! (the kernel then drops the SYN, so a connect hangs as it would towards a silent host).
//! Time is tokio's paused clock: the test measures the dial's virtual time, never the wall.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use agentguard_netpin::{DialError, PinnedHost, dial};
use agentguard_policy::Host;
use tokio::net::{TcpListener, TcpSocket};

/// A listener on `ip` (port 0 for any) that never accepts, with its queue filled, so that
/// the next connect to it hangs. The returned streams keep the queue full.
fn hanging(ip: Ipv4Addr, port: u16) -> (TcpListener, Vec<std::net::TcpStream>) {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(IpAddr::V4(ip), port))
        .expect("bind");
    let listener = socket.listen(0).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let mut fillers = Vec::new();
    // Connect until one does not complete: from then on the queue is full.
    for _ in 0..8 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(stream) => fillers.push(stream),
            Err(_) => return (listener, fillers),
        }
    }
    panic!("the accept queue of {addr} never filled");
}

fn host(addrs: &[Ipv4Addr]) -> PinnedHost {
    PinnedHost {
        name: match Host::parse("slow.example.test") {
            Ok(Host::Domain(name)) => name,
            other => panic!("not a domain name: {other:?}"),
        },
        addrs: addrs.iter().map(|ip| IpAddr::V4(*ip)).collect(),
    }
}

#[tokio::test(start_paused = true)]
async fn many_hanging_addresses_cost_one_timeout_in_all() {
    let (first, _a) = hanging(Ipv4Addr::new(127, 0, 0, 4), 0);
    let port = first.local_addr().expect("addr").port();
    let (_second, _b) = hanging(Ipv4Addr::new(127, 0, 0, 5), port);
    let (_third, _c) = hanging(Ipv4Addr::new(127, 0, 0, 6), port);
    let pinned = host(&[
        Ipv4Addr::new(127, 0, 0, 4),
        Ipv4Addr::new(127, 0, 0, 5),
        Ipv4Addr::new(127, 0, 0, 6),
    ]);
    let timeout = Duration::from_secs(9);
    let start = tokio::time::Instant::now();
    let outcome = dial(&pinned, port, timeout).await;
    let spent = start.elapsed();
    match outcome {
        Err(DialError::Timeout { limit }) => assert_eq!(limit, timeout),
        other => panic!("expected the dial to time out, got {other:?}"),
    }
    // One timeout per address would be 27 s.
    assert!(
        spent <= timeout,
        "the dial took {spent:?} of a {timeout:?} budget"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_first_address_leaves_time_for_the_next() {
    let (first, _a) = hanging(Ipv4Addr::new(127, 0, 0, 4), 0);
    let port = first.local_addr().expect("addr").port();
    let good = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 5), port))
        .await
        .expect("bind the good address on the same port");
    let pinned = host(&[Ipv4Addr::new(127, 0, 0, 4), Ipv4Addr::new(127, 0, 0, 5)]);
    let timeout = Duration::from_secs(10);
    let start = tokio::time::Instant::now();
    let (_stream, addr) = dial(&pinned, port, timeout).await.expect("dial");
    assert_eq!(addr, good.local_addr().expect("addr"));
    // The first address got its half, not the whole budget.
    let spent = start.elapsed();
    assert!(
        spent <= timeout / 2 + Duration::from_secs(1),
        "spent {spent:?}"
    );
}

fn pinned(addrs: &[IpAddr]) -> PinnedHost {
    PinnedHost {
        addrs: addrs.to_vec(),
        ..host(&[])
    }
}

/// A dial to a listener on this machine completes inside the connect call (the kernel runs
/// the loopback handshake there), so the dial is ready at its first poll, without waiting for
/// the runtime's next turn. Tried twenty times: a loaded kernel may defer its network work
/// now and then, but a dial that always waits for the runtime never passes.
#[tokio::test]
async fn a_dial_over_loopback_is_ready_at_its_first_poll_with_nodelay() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    let target = listener.local_addr().expect("addr");
    let pinned = pinned(&[target.ip()]);
    let mut at_once = 0;
    for _ in 0..20 {
        let mut dial = std::pin::pin!(dial(&pinned, target.port(), Duration::from_secs(5)));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let (stream, dialed) = match dial.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(outcome) => {
                at_once += 1;
                outcome.expect("dial")
            }
            std::task::Poll::Pending => dial.await.expect("dial"),
        };
        assert_eq!(dialed, target);
        assert_eq!(stream.peer_addr().expect("peer"), target);
        assert!(stream.nodelay().expect("nodelay"), "TCP_NODELAY is not set");
        let (accepted, _) = listener.accept().await.expect("accept");
        assert_eq!(
            accepted.peer_addr().expect("peer"),
            stream.local_addr().expect("local")
        );
    }
    assert!(at_once > 0, "no dial of 20 was ready at its first poll");
}

/// An address that refuses (nothing listens there) is reported with the kernel's error, and
/// the next address is tried.
#[tokio::test]
async fn a_refusing_address_is_reported_and_the_next_one_tried() {
    let good = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 8), 0))
        .await
        .expect("bind");
    let port = good.local_addr().expect("addr").port();
    let refusing = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 7));
    match dial(&pinned(&[refusing]), port, Duration::from_secs(5)).await {
        Err(DialError::Connect { name, attempts }) => {
            assert_eq!(name, "slow.example.test");
            assert_eq!(attempts.len(), 1);
            assert_eq!(attempts[0].0, SocketAddr::new(refusing, port));
            assert_eq!(attempts[0].1.kind(), std::io::ErrorKind::ConnectionRefused);
        }
        other => panic!("expected a refused connect, got {other:?}"),
    }
    let both = pinned(&[refusing, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 8))]);
    let (_stream, dialed) = dial(&both, port, Duration::from_secs(5))
        .await
        .expect("the second address");
    assert_eq!(dialed, good.local_addr().expect("addr"));
}

/// IPv6 addresses are dialed as IPv6 (a socket of that family).
#[tokio::test]
async fn an_ipv6_address_is_dialed() {
    let listener = TcpListener::bind((std::net::Ipv6Addr::LOCALHOST, 0))
        .await
        .expect("bind ::1 (this machine's loopback has IPv6)");
    let target = listener.local_addr().expect("addr");
    let (stream, dialed) = dial(
        &pinned(&[target.ip()]),
        target.port(),
        Duration::from_secs(5),
    )
    .await
    .expect("dial ::1");
    assert_eq!(dialed, target);
    assert!(stream.local_addr().expect("local").is_ipv6());
}

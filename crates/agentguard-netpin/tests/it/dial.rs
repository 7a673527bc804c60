//! The dial's overall deadline, against listeners on this machine whose accept queue is full
//! (the kernel then drops the SYN, so a connect hangs as it would towards a silent host).
//! Time is tokio's paused clock: the test measures the dial's virtual time, never the wall.

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

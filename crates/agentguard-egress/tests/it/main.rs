//! Integration tests of the egress proxy on loopback: a fake DNS server on 127.0.0.1, echo and
//! TLS upstreams on 127.0.0.2 (allowed through an allow-CIDR, standing in for a public address)
//! and 127.0.0.3 (standing in for a private one), raw clients, curl and Python.

mod audit_log;
mod clients;
mod hardening;
mod hostile;
mod limits;
mod observe;
mod reload;
mod routes;
mod sni;
mod statuses;
mod unix;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use agentguard_audit::MemorySink;
use agentguard_egress::{EgressProxy, EgressProxyBuilder};
use agentguard_netpin::DnsResolver;
use agentguard_policy::{TargetPolicy, TargetPolicyBuilder, parse_cidr};
use agentguard_test_support::{EchoServer, FakeDns};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) const GOOD: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
pub(crate) const BAD: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));

pub(crate) struct Env {
    pub(crate) dns: FakeDns,
    pub(crate) good: EchoServer,
    pub(crate) _bad: EchoServer,
    pub(crate) audit: Arc<MemorySink>,
}

impl Env {
    /// Echo servers on 127.0.0.2 and 127.0.0.3 on the same port, and names for them.
    pub(crate) async fn start() -> Env {
        let dns = FakeDns::start().await;
        loop {
            let good = EchoServer::try_start(GOOD, 0).await.unwrap();
            if let Ok(bad) = EchoServer::try_start(BAD, good.addr().port()).await {
                dns.answer("pkgs.example.test", &[GOOD]);
                dns.answer("a.b.example.test", &[GOOD]);
                dns.answer("example.test", &[GOOD]);
                return Env {
                    dns,
                    good,
                    _bad: bad,
                    audit: Arc::new(MemorySink::default()),
                };
            }
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.good.addr().port()
    }

    /// The policy of the tests: `hosts` on the echo port, and 127.0.0.2/32 reachable.
    pub(crate) fn policy(&self, hosts: &[&str]) -> TargetPolicyBuilder {
        hosts.iter().fold(
            TargetPolicy::builder()
                .allow_port(self.port())
                .allow_cidr(parse_cidr("127.0.0.2/32").unwrap()),
            |policy, host| policy.allow(*host),
        )
    }

    /// A proxy on 127.0.0.1:0 allowing `hosts` on the echo port, 127.0.0.2/32, the fake DNS.
    pub(crate) fn proxy(&self, hosts: &[&str]) -> EgressProxyBuilder {
        self.proxy_for(self.policy(hosts))
    }

    /// A proxy on 127.0.0.1:0 enforcing `policy` (none when it does not build, so that
    /// `start` refuses), resolving through the fake DNS.
    pub(crate) fn proxy_for(&self, policy: TargetPolicyBuilder) -> EgressProxyBuilder {
        let builder = EgressProxy::builder()
            .bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
            .resolver(Arc::new(
                DnsResolver::with_nameservers(&[self.dns.addr()]).unwrap(),
            ))
            .audit(self.audit.clone());
        match policy.build() {
            Ok(policy) => builder.policy(policy),
            Err(_) => builder,
        }
    }
}

/// A whole reply to a refused request: status, head, body (read until the proxy closes).
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

/// The body of a reply, with a chunked transfer coding undone.
pub(crate) fn body(reply: &Reply) -> String {
    let chunked = reply
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    if !chunked {
        return reply.body.clone();
    }
    let mut rest = reply.body.as_str();
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    out
}

/// Sends raw bytes and reads everything until the proxy closes the connection.
pub(crate) async fn send(proxy: SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut all = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut all),
    )
    .await;
    parse_reply(&all)
}

pub(crate) fn parse_reply(all: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(all).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// Opens a tunnel and returns the stream just after the 200 reply.
pub(crate) async fn tunnel(proxy: SocketAddr, target: &str) -> TcpStream {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream
        .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).await.unwrap(),
            1,
            "the proxy closed: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    assert_eq!(
        head,
        b"HTTP/1.1 200 Connection Established\r\n\r\n",
        "{}",
        String::from_utf8_lossy(&head)
    );
    stream
}

/// Writes `data` through a tunnel and reads the same number of bytes back.
pub(crate) async fn echo(stream: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    stream.write_all(data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    stream.read_exact(&mut back).await.unwrap();
    back
}

/// A listener on `ip:port` (0 picks one) with a backlog of 0 that never accepts, its queue
/// filled: the kernel drops further SYNs on loopback, so a dial to it hangs. Keep the value
/// alive while the dial should hang.
pub(crate) struct BlackHole {
    pub(crate) port: u16,
    _listener: tokio::net::TcpListener,
    _fillers: Vec<TcpStream>,
}

impl BlackHole {
    pub(crate) async fn start(ip: IpAddr, port: u16) -> std::io::Result<BlackHole> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(ip, port))?;
        let listener = socket.listen(0)?;
        let port = listener.local_addr()?.port();
        let mut fillers = Vec::new();
        for _ in 0..4 {
            if let Ok(Ok(s)) = tokio::time::timeout(
                std::time::Duration::from_millis(300),
                TcpStream::connect((ip, port)),
            )
            .await
            {
                fillers.push(s);
            }
        }
        Ok(BlackHole {
            port,
            _listener: listener,
            _fillers: fillers,
        })
    }
}

/// Waits (bounded) until the sink holds a record of `kind`; returns it.
pub(crate) async fn wait_for(
    audit: &Arc<MemorySink>,
    kind: agentguard_audit::Kind,
    within: std::time::Duration,
) -> agentguard_audit::Record {
    let audit = Arc::clone(audit);
    tokio::task::spawn_blocking(move || {
        let records = audit.wait_until(within, |records| records.iter().any(|r| r.kind == kind));
        let records = records.unwrap_or_else(|| {
            panic!("no {kind:?} event within {within:?}: {:?}", audit.records())
        });
        records.into_iter().find(|r| r.kind == kind).unwrap()
    })
    .await
    .unwrap()
}

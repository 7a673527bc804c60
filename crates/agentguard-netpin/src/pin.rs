//! Resolve once, check every answer, dial exactly the checked addresses.
//!
//! This is the guarantee the crate exists for: the addresses that passed the check are the
//! only ones ever dialed, and the name is never resolved a second time for the dial, so a DNS
//! server that answers differently later (rebinding) cannot redirect the connection.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use agentguard_policy::{AddressPolicy, DomainName};
use tokio::net::TcpStream;

use crate::error::{DialError, PinError};
use crate::resolve::Resolve;

/// The default bound on the number of answers considered for one name.
pub const DEFAULT_MAX_ANSWERS: usize = 32;

/// A name and the addresses that passed the address policy: the only ones to dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedHost {
    /// The name.
    pub name: DomainName,
    /// The checked addresses, in resolver order, without duplicates.
    pub addrs: Vec<IpAddr>,
}

/// Resolves `name` once and checks every answer: one non-public answer refuses the name.
pub async fn pin(
    resolver: &dyn Resolve,
    policy: &AddressPolicy,
    name: &DomainName,
    max_answers: usize,
) -> Result<PinnedHost, PinError> {
    let answers = resolver
        .lookup(name)
        .await
        .map_err(|source| PinError::Dns {
            name: name.to_string(),
            source,
        })?;
    let mut addrs: Vec<IpAddr> = Vec::with_capacity(answers.len());
    for ip in answers {
        if !addrs.contains(&ip) {
            addrs.push(ip);
        }
    }
    if addrs.len() > max_answers {
        return Err(PinError::TooManyAnswers {
            name: name.to_string(),
            count: addrs.len(),
            limit: max_answers,
        });
    }
    policy.check_all(&addrs).map_err(|denial| {
        PinError::Denied(agentguard_policy::Denial {
            message: format!("{} resolved to {addrs:?}: {}", name, denial.message),
            ..denial
        })
    })?;
    Ok(PinnedHost {
        name: name.clone(),
        addrs,
    })
}

/// Connects to `addr` with `TCP_NODELAY` set. The connect is made non-blocking and its
/// completion checked at once: where the kernel completes the handshake within the call (an
/// upstream on this machine, over loopback), the stream is returned without a turn of the
/// event loop, so no other connection's work runs between this dial and the caller's next
/// step (measured in docs/PERFORMANCE.md, "Connection setup"). Otherwise it waits for the
/// socket to become writable, as tokio's own connect does, and reports the connect's error.
async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    let socket = rustix::net::socket_with(family, SocketType::STREAM, flags, None)?;
    // A latency setting, not a safety one: a socket that refuses it is still dialed.
    let _ = rustix::net::sockopt::set_tcp_nodelay(&socket, true);
    match rustix::net::connect(&socket, &addr) {
        // An interrupted non-blocking connect goes on in the background, as one in progress.
        Ok(()) | Err(rustix::io::Errno::INPROGRESS | rustix::io::Errno::INTR) => {}
        Err(e) => return Err(e.into()),
    }
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    // A peer address means the handshake is complete; until then (or after a refusal) the
    // kernel answers ENOTCONN, and writability marks the end either way.
    if stream.peer_addr().is_err() {
        stream.writable().await?;
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
    }
    Ok(stream)
}

/// Connects to the pinned addresses in order and returns the first stream that connects.
/// Never resolves anything.
///
/// The whole dial, across every address, is bounded by `timeout`: each attempt gets an equal
/// share of what is left, so a name with many addresses that all hang costs `timeout`, not
/// one `timeout` per address.
pub async fn dial(
    pinned: &PinnedHost,
    port: u16,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), DialError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut failures = Vec::new();
    let mut timed_out = 0;
    for (i, ip) in pinned.addrs.iter().enumerate() {
        let addr = SocketAddr::new(*ip, port);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let share = left / u32::try_from(pinned.addrs.len() - i).unwrap_or(u32::MAX);
        match tokio::time::timeout(share, connect(addr)).await {
            Ok(Ok(stream)) => return Ok((stream, addr)),
            Ok(Err(e)) => failures.push((addr, e)),
            Err(_) => {
                timed_out += 1;
                failures.push((
                    addr,
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("timed out after {share:?}"),
                    ),
                ));
            }
        }
    }
    if timed_out > 0 && timed_out == pinned.addrs.len() {
        return Err(DialError::Timeout { limit: timeout });
    }
    Err(DialError::Connect {
        name: pinned.name.to_string(),
        attempts: failures,
    })
}

//! A DNS server for tests: answers A and AAAA queries over UDP from a table, with TTL 0
//! unless a benchmark asks for a cacheable answer.
//!
//! It can answer differently to the first query for a name and type than to later ones (DNS
//! rebinding), answer NXDOMAIN, and it logs every query so that tests can count them.
//! Names not in the table get NXDOMAIN.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

#[derive(Debug, Clone)]
enum Zone {
    Records {
        first: Vec<IpAddr>,
        later: Vec<IpAddr>,
        ttl: u32,
        /// How long to wait before answering.
        delay: std::time::Duration,
    },
    NxDomain,
    /// Queries are logged and never answered.
    Silent,
}

#[derive(Debug, Default)]
struct State {
    zones: HashMap<String, Zone>,
    /// Every query received: (name, type).
    log: Vec<(String, u16)>,
}

/// The fake DNS server. Stops when dropped.
#[derive(Debug)]
pub struct FakeDns {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for FakeDns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn canonical(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl FakeDns {
    /// Starts the server on 127.0.0.1 at a free UDP port.
    pub async fn start() -> FakeDns {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind fake DNS");
        let addr = socket.local_addr().expect("fake DNS address");
        let state = Arc::new(Mutex::new(State::default()));
        let task = tokio::spawn(serve(Arc::new(socket), Arc::clone(&state)));
        FakeDns { addr, state, task }
    }

    /// The address to use as a name server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers `name` with `ips` (A for IPv4, AAAA for IPv6), every time, with TTL 0.
    pub fn answer(&self, name: &str, ips: &[IpAddr]) {
        self.rebind(name, ips, ips);
    }

    /// Answers `name` with `ips` and a TTL, so resolvers may cache the answer (benchmarks).
    pub fn answer_with_ttl(&self, name: &str, ips: &[IpAddr], ttl: u32) {
        self.state.lock().unwrap().zones.insert(
            canonical(name),
            Zone::Records {
                first: ips.to_vec(),
                later: ips.to_vec(),
                ttl,
                delay: std::time::Duration::ZERO,
            },
        );
    }

    /// Answers the first query of each type for `name` from `first`, later ones from `later`.
    pub fn rebind(&self, name: &str, first: &[IpAddr], later: &[IpAddr]) {
        self.state.lock().unwrap().zones.insert(
            canonical(name),
            Zone::Records {
                first: first.to_vec(),
                later: later.to_vec(),
                ttl: 0,
                delay: std::time::Duration::ZERO,
            },
        );
    }

    /// Answers `name` with `ips` (TTL 60), but only after `delay`.
    pub fn answer_after(&self, name: &str, ips: &[IpAddr], delay: std::time::Duration) {
        self.state.lock().unwrap().zones.insert(
            canonical(name),
            Zone::Records {
                first: ips.to_vec(),
                later: ips.to_vec(),
                ttl: 60,
                delay,
            },
        );
    }

    /// Never answers queries for `name` (they are still counted).
    pub fn silent(&self, name: &str) {
        self.state
            .lock()
            .unwrap()
            .zones
            .insert(canonical(name), Zone::Silent);
    }

    /// Answers NXDOMAIN for `name`.
    pub fn nxdomain(&self, name: &str) {
        self.state
            .lock()
            .unwrap()
            .zones
            .insert(canonical(name), Zone::NxDomain);
    }

    /// The record types queried for `name`, in order (`"A"`, `"AAAA"`, or the number).
    pub fn queries(&self, name: &str) -> Vec<String> {
        let name = canonical(name);
        self.state
            .lock()
            .unwrap()
            .log
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, t)| match *t {
                TYPE_A => "A".to_owned(),
                TYPE_AAAA => "AAAA".to_owned(),
                other => other.to_string(),
            })
            .collect()
    }

    /// Every query received, for any name.
    pub fn total_queries(&self) -> usize {
        self.state.lock().unwrap().log.len()
    }
}

/// How long to wait before answering this query.
fn delay_of(query: &[u8], state: &Mutex<State>) -> Option<std::time::Duration> {
    let name = question_name(query)?;
    match state.lock().unwrap().zones.get(&name) {
        Some(Zone::Records { delay, .. }) => Some(*delay),
        _ => None,
    }
}

/// The question's name, lower case, without the root dot.
fn question_name(query: &[u8]) -> Option<String> {
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = *query.get(pos)? as usize;
        pos += 1;
        if len == 0 {
            return Some(labels.join("."));
        }
        labels.push(String::from_utf8_lossy(query.get(pos..pos + len)?).to_ascii_lowercase());
        pos += len;
    }
}

async fn serve(socket: Arc<UdpSocket>, state: Arc<Mutex<State>>) {
    let mut buf = [0u8; 1500];
    loop {
        let Ok((len, peer)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Some(reply) = respond(&buf[..len], &state) else {
            continue;
        };
        match delay_of(&buf[..len], &state) {
            Some(delay) if !delay.is_zero() => {
                let socket = Arc::clone(&socket);
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = socket.send_to(&reply, peer).await;
                });
            }
            _ => {
                let _ = socket.send_to(&reply, peer).await;
            }
        }
    }
}

/// Parses one query and builds the reply; `None` for anything that is not a query.
fn respond(query: &[u8], state: &Mutex<State>) -> Option<Vec<u8>> {
    if query.len() < 12 || query[2] & 0x80 != 0 {
        return None;
    }
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = *query.get(pos)? as usize;
        pos += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        labels.push(String::from_utf8_lossy(query.get(pos..pos + len)?).to_ascii_lowercase());
        pos += len;
    }
    let qtype = u16::from_be_bytes([*query.get(pos)?, *query.get(pos + 1)?]);
    let question_end = pos + 4;
    query.get(..question_end)?;
    let name = labels.join(".");

    let mut state = state.lock().unwrap();
    let previous = state
        .log
        .iter()
        .filter(|(n, t)| *n == name && *t == qtype)
        .count();
    state.log.push((name.clone(), qtype));
    let (rcode, answers, ttl): (u16, Vec<IpAddr>, u32) = match state.zones.get(&name) {
        None | Some(Zone::NxDomain) => (3, Vec::new(), 0),
        Some(Zone::Silent) => return None,
        Some(Zone::Records {
            first, later, ttl, ..
        }) => {
            let pool = if previous == 0 { first } else { later };
            let wanted = pool
                .iter()
                .copied()
                .filter(|ip| {
                    matches!(
                        (ip, qtype),
                        (IpAddr::V4(_), TYPE_A) | (IpAddr::V6(_), TYPE_AAAA)
                    )
                })
                .collect();
            (0, wanted, *ttl)
        }
    };
    drop(state);
    Some(reply(query, question_end, qtype, rcode, &answers, ttl))
}

/// The reply to the question at `query[12..question_end]`: the answers, or for none, an SOA.
fn reply(
    query: &[u8],
    question_end: usize,
    qtype: u16,
    rcode: u16,
    answers: &[IpAddr],
    ttl: u32,
) -> Vec<u8> {
    let mut reply = Vec::with_capacity(512);
    reply.extend_from_slice(&query[..2]);
    let rd = u16::from_be_bytes([query[2], query[3]]) & 0x0100;
    reply.extend_from_slice(&(0x8000 | 0x0400 | rd | 0x0080 | rcode).to_be_bytes());
    reply.extend_from_slice(&1u16.to_be_bytes());
    reply.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    // A negative answer (NXDOMAIN, or no record of this type) carries an SOA in the authority
    // section whose minimum is the negative-caching TTL (RFC 2308), as real servers send.
    let negative = answers.is_empty();
    reply.extend_from_slice(&u16::from(negative).to_be_bytes());
    reply.extend_from_slice(&[0, 0]);
    reply.extend_from_slice(&query[12..question_end]);
    for ip in answers {
        reply.extend_from_slice(&[0xC0, 0x0C]);
        reply.extend_from_slice(&qtype.to_be_bytes());
        reply.extend_from_slice(&1u16.to_be_bytes());
        reply.extend_from_slice(&ttl.to_be_bytes());
        match *ip {
            IpAddr::V4(v4) => {
                reply.extend_from_slice(&4u16.to_be_bytes());
                reply.extend_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                reply.extend_from_slice(&16u16.to_be_bytes());
                reply.extend_from_slice(&v6.octets());
            }
        }
    }
    if negative {
        reply.extend_from_slice(&[0xC0, 0x0C]);
        reply.extend_from_slice(&6u16.to_be_bytes());
        reply.extend_from_slice(&1u16.to_be_bytes());
        reply.extend_from_slice(&ttl.to_be_bytes());
        reply.extend_from_slice(&22u16.to_be_bytes());
        // MNAME and RNAME: the root; then serial, refresh, retry, expire, minimum.
        reply.extend_from_slice(&[0, 0]);
        for value in [1u32, 3600, 600, 86400, ttl] {
            reply.extend_from_slice(&value.to_be_bytes());
        }
    }
    reply
}

//! Real servers for network tests, all on loopback: a DNS server speaking the DNS protocol
//! over UDP, a TLS upstream with a test CA, and a listener that records who connected; and a
//! fake container engine CLI for the tests around an engine; and the one bounded wait on a
//! condition ([`eventually`]).
//!
//! It exists so that the netpin and egress tests meet real protocol peers instead of mocks,
//! while obeying the network rule: everything binds to 127.0.0.0/8 and nothing here ever
//! dials out. Shared by the crates' integration tests (hickory's `test-support` pattern).

#![warn(missing_docs)]

mod ca;
mod clients;
mod dns;
mod echo;
mod engine;
pub mod index;
mod kmock;
mod listener;
mod tls;
mod wait;

pub use ca::TestCa;
pub use clients::{CLIENT_ENV, clean_client_env};
pub use dns::FakeDns;
pub use echo::EchoServer;
pub use engine::FakeEngine;
pub use kmock::{KmockCluster, REQUIRE_KMOCK, k8s_python};
pub use listener::{RecordingListener, free_port};
pub use tls::{Answer, MakeAnswer, Seen, TlsUpstream, UpstreamOptions};
pub use wait::{eventually, eventually_blocking};

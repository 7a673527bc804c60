//! A TCP listener that records every connection and the first bytes sent on it.
//!
//! Used to prove that something did NOT connect (for example, a fetch with `HTTPS_PROXY`
//! pointing here must leave it untouched).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The recording listener. Stops when dropped.
#[derive(Debug)]
pub struct RecordingListener {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    task: JoinHandle<()>,
}

impl Drop for RecordingListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RecordingListener {
    /// Listens on 127.0.0.1 at a free port.
    pub async fn start() -> RecordingListener {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind recorder");
        let addr = listener.local_addr().expect("recorder address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let index = {
                        let mut log = log.lock().unwrap();
                        log.push(Vec::new());
                        log.len() - 1
                    };
                    let mut buf = [0u8; 1024];
                    if let Ok(n) = stream.read(&mut buf).await {
                        log.lock().unwrap()[index].extend_from_slice(&buf[..n]);
                    }
                });
            }
        });
        RecordingListener { addr, seen, task }
    }

    /// The address to point a client at.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections were accepted.
    pub fn connections(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// A port free on 127.0.0.1 just now (for a relay or a proxy that must be told its port
/// before it binds; another process may still take it, which the caller's bind reports).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

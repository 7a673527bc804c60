//! A test certificate authority and an HTTPS upstream that records what it saw.
//!
//! The CA is generated per test run (nothing secret is checked in). The upstream serves one
//! HTTP/1.1 request per connection on a chosen loopback address and records the TLS SNI and
//! the request head, so tests can prove which address a request landed on and under which
//! name. Paths: `/redirect` (302), `/big/N` (N bytes with a length), `/stream/N` (N bytes,
//! chunked), `/status/N` (that status), any path given to [`TlsUpstream::start_with_files`]
//! (that file), anything else `hello from IP`.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// A certificate authority made for one test run.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestCa")
    }
}

impl TestCa {
    /// A new CA named `common_name`.
    pub fn new(common_name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().expect("CA key");
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).expect("self-signed CA"),
        }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server configuration with a certificate for `names`, signed by this CA.
    pub fn server_config(&self, names: &[&str]) -> Arc<ServerConfig> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let params = CertificateParams::new(names).expect("leaf params");
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        let chain: Vec<CertificateDer<'static>> =
            vec![cert.der().clone(), self.issuer.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// What the upstream saw on one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The SNI the client sent, if any.
    pub sni: Option<String>,
    /// The request head (request line and headers), as text.
    pub head: String,
}

/// An HTTPS server on one loopback address. Stops when dropped.
#[derive(Debug)]
pub struct TlsUpstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsUpstream {
    /// Serves on `ip` (a loopback address) at `port` (0 for a free one).
    pub async fn start(ip: IpAddr, port: u16, config: Arc<ServerConfig>) -> TlsUpstream {
        TlsUpstream::try_start(ip, port, config)
            .await
            .expect("bind TLS upstream")
    }

    /// Like [`TlsUpstream::start`], but reports a port that is taken instead of panicking.
    pub async fn try_start(
        ip: IpAddr,
        port: u16,
        config: Arc<ServerConfig>,
    ) -> std::io::Result<TlsUpstream> {
        TlsUpstream::start_with_files(ip, port, config, Vec::new()).await
    }

    /// Like [`TlsUpstream::try_start`], also serving `files`: (path, content type, body), for
    /// example a PEP 503 package index.
    pub async fn start_with_files(
        ip: IpAddr,
        port: u16,
        config: Arc<ServerConfig>,
        files: Vec<(String, String, Vec<u8>)>,
    ) -> std::io::Result<TlsUpstream> {
        let files = Arc::new(files);
        let listener = TcpListener::bind((ip, port)).await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let acceptor = TlsAcceptor::from(config);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let log = Arc::clone(&log);
                let files = Arc::clone(&files);
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let sni = tls.get_ref().1.server_name().map(str::to_owned);
                    let mut head = Vec::new();
                    let mut buf = [0u8; 2048];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    log.lock().unwrap().push(Seen { sni, head });
                    let file = files.iter().find(|(p, _, _)| *p == path);
                    let _ = match file {
                        Some((_, kind, body)) => {
                            let head = format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                                body.len()
                            );
                            match tls.write_all(head.as_bytes()).await {
                                Ok(()) => tls.write_all(body).await,
                                Err(e) => Err(e),
                            }
                        }
                        None => respond(&mut tls, &path, addr.ip()).await,
                    };
                    let _ = tls.shutdown().await;
                });
            }
        });
        Ok(TlsUpstream { addr, seen, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every connection that completed a TLS handshake and sent a request head.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn respond<W: AsyncWriteExt + Unpin>(
    out: &mut W,
    path: &str,
    ip: IpAddr,
) -> std::io::Result<()> {
    let number = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|n| n.parse::<usize>().ok())
    };
    if path == "/redirect" {
        return out
            .write_all(b"HTTP/1.1 302 Found\r\nLocation: https://elsewhere.example.test/next\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
    }
    if let Some(n) = number("/big/") {
        out.write_all(
            format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        return out.write_all(&vec![b'x'; n]).await;
    }
    if let Some(n) = number("/stream/") {
        out.write_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )
        .await?;
        let mut left = n;
        while left > 0 {
            let chunk = left.min(8192);
            out.write_all(format!("{chunk:x}\r\n").as_bytes()).await?;
            out.write_all(&vec![b'y'; chunk]).await?;
            out.write_all(b"\r\n").await?;
            left -= chunk;
        }
        return out.write_all(b"0\r\n\r\n").await;
    }
    if let Some(status) = number("/status/") {
        let body = format!("status {status}\n");
        return out
            .write_all(format!("HTTP/1.1 {status} Test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes())
            .await;
    }
    let body = format!("hello from {ip}\n");
    out.write_all(
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes(),
    )
    .await
}

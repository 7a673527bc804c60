//! The TLS name check on tunnels: a real TLS client whose ClientHello arrives one byte per
//! segment, Python's ssl asking for another name, and hand-made ClientHellos with another
//! name, without one, and a first byte that is not TLS. (curl and Python's urllib pass the
//! check in clients.rs.)

use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use agentguard_audit::Kind;
use agentguard_egress::EgressProxy;
use agentguard_test_support::{CLIENT_ENV, TestCa, TlsUpstream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::{Env, GOOD, tunnel, wait_for};

struct Setup {
    env: Env,
    ca: TestCa,
    upstream: TlsUpstream,
    proxy: EgressProxy,
}

async fn setup(check: bool) -> Setup {
    let env = Env::start().await;
    let ca = TestCa::new("egress SNI test CA");
    let names = ["pkgs.example.test", "other.example.test"];
    let upstream = TlsUpstream::start(GOOD, 0, ca.server_config(&names)).await;
    let port = upstream.addr().port();
    let proxy = env
        .proxy_for(env.policy(&["pkgs.example.test"]).allow_port(port))
        .tls_ports([port])
        .sni_check(check)
        .start()
        .await
        .unwrap();
    Setup {
        env,
        ca,
        upstream,
        proxy,
    }
}

impl Setup {
    fn target(&self) -> String {
        format!("pkgs.example.test:{}", self.upstream.addr().port())
    }

    fn connector(&self) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(self.ca.pem().as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// A ClientHello from rustls asking for `name`.
    fn hello(&self, name: &str) -> Vec<u8> {
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut bytes = Vec::new();
        client.write_tls(&mut bytes).unwrap();
        bytes
    }
}

/// A stream whose first `left` written bytes go out one per write (and so, with
/// `TCP_NODELAY`, one per segment).
struct Trickle {
    inner: TcpStream,
    left: usize,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Trickle {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let n = if self.left > 0 {
            1.min(buf.len())
        } else {
            buf.len()
        };
        let poll = Pin::new(&mut self.inner).poll_write(cx, &buf[..n]);
        if let Poll::Ready(Ok(written)) = poll {
            self.left = self.left.saturating_sub(written);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn a_client_hello_one_byte_per_segment_passes_and_the_exchange_completes() {
    let s = setup(true).await;
    let stream = tunnel(s.proxy.local_addr(), &s.target()).await;
    stream.set_nodelay(true).unwrap();
    let trickle = Trickle {
        inner: stream,
        left: 4096,
    };
    let name = rustls::pki_types::ServerName::try_from("pkgs.example.test").unwrap();
    let mut tls = s.connector().connect(name, trickle).await.unwrap();
    tls.write_all(b"GET /split HTTP/1.1\r\nHost: pkgs.example.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), tls.read_to_end(&mut response)).await;
    let response = String::from_utf8_lossy(&response);
    assert!(response.contains("hello from 127.0.0.2"), "{response}");
    assert_eq!(
        s.upstream.seen()[0].sni.as_deref(),
        Some("pkgs.example.test")
    );
}

/// Sends `first` after the 200 and returns the close event (the upstream must see nothing).
async fn closed_after(s: &Setup, first: &[u8]) -> agentguard_audit::Record {
    let mut stream = tunnel(s.proxy.local_addr(), &s.target()).await;
    stream.write_all(first).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
    let close = wait_for(&s.env.audit, Kind::EgressClose, Duration::from_secs(10)).await;
    assert_eq!(
        close.data["bytes_up"], 0,
        "nothing was forwarded: {close:?}"
    );
    assert!(s.upstream.seen().is_empty());
    close
}

#[tokio::test]
async fn a_hand_made_hello_for_another_name_is_closed_as_sni_mismatch() {
    let s = setup(true).await;
    let close = closed_after(&s, &s.hello("other.example.test")).await;
    assert_eq!(close.reason, "sni_mismatch", "{close:?}");
    assert_eq!(close.data["sni"], "other.example.test");
}

#[tokio::test]
async fn a_hello_without_a_name_is_closed_as_sni_missing() {
    let s = setup(true).await;
    // The hello from rustls, with its server_name extension (type 0) renamed to an unknown
    // type, so the bytes are otherwise a real ClientHello.
    let mut hello = s.hello("pkgs.example.test");
    let name = b"pkgs.example.test";
    let at = hello.windows(name.len()).position(|w| w == name).unwrap();
    // extension type (2) + length (2) + list length (2) + name type (1) + name length (2)
    let ext = at - 9;
    assert_eq!(&hello[ext..ext + 2], &[0, 0]);
    hello[ext..ext + 2].copy_from_slice(&[0xff, 0x7e]);
    let close = closed_after(&s, &hello).await;
    assert_eq!(close.reason, "sni_missing", "{close:?}");
}

#[tokio::test]
async fn a_first_byte_that_is_not_tls_is_closed_as_not_tls() {
    let s = setup(true).await;
    let close = closed_after(&s, b"GET / HTTP/1.1\r\nHost: pkgs.example.test\r\n\r\n").await;
    assert_eq!(close.reason, "not_tls", "{close:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_ssl_asking_for_another_name_is_refused() {
    let s = setup(true).await;
    let ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca_file.path(), s.ca.pem()).unwrap();
    let script = "import socket, ssl, sys\n\
                  host, port = sys.argv[1].rsplit(':', 1)\n\
                  sock = socket.create_connection((host, int(port)), timeout=20)\n\
                  sock.sendall(('CONNECT %s HTTP/1.1\\r\\n\\r\\n' % sys.argv[2]).encode())\n\
                  head = b''\n\
                  while not head.endswith(b'\\r\\n\\r\\n'):\n    head += sock.recv(1)\n\
                  print(head.split(b' ')[1].decode())\n\
                  ctx = ssl.create_default_context(cafile=sys.argv[3])\n\
                  try:\n    ctx.wrap_socket(sock, server_hostname='other.example.test')\n    print('handshake completed')\n\
                  except (ssl.SSLError, OSError) as e:\n    print('refused', type(e).__name__)\n";
    let mut command = Command::new("python3");
    command
        .args(["-c", script])
        .arg(s.proxy.local_addr().to_string())
        .arg(s.target())
        .arg(ca_file.path());
    for var in CLIENT_ENV {
        command.env_remove(var);
    }
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("200\nrefused"),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let close = wait_for(&s.env.audit, Kind::EgressClose, Duration::from_secs(10)).await;
    assert_eq!(close.reason, "sni_mismatch");
    assert!(s.upstream.seen().is_empty());
}

#[tokio::test]
async fn with_the_check_off_another_name_passes() {
    let s = setup(false).await;
    let stream = tunnel(s.proxy.local_addr(), &s.target()).await;
    let name = rustls::pki_types::ServerName::try_from("other.example.test").unwrap();
    let mut tls = s.connector().connect(name, stream).await.unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nHost: other.example.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), tls.read_to_end(&mut response)).await;
    assert_eq!(
        s.upstream.seen()[0].sni.as_deref(),
        Some("other.example.test")
    );
}

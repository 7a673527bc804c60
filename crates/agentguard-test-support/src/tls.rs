//! An HTTPS upstream that records what it saw (its certificate from `ca.rs`'s test CA).
//!
//! The upstream serves one
//! HTTP/1.1 request per connection on a chosen loopback address and records the TLS SNI and
//! the request head, so tests can prove which address a request landed on and under which
//! name. Paths: `/redirect` (302), `/big/N` (N bytes with a length), `/stream/N` (N bytes,
//! chunked), `/status/N` (that status), any path given to [`TlsUpstream::start_with_files`]
//! (that file), `/echo` (the request head and body, as text), `/echo-split` (the same, sent
//! as two chunks cut inside the `authorization` value), `/sse` (one server-sent event, then a
//! second once [`TlsUpstream::release`] is called), `/hang` (no answer at all),
//! `/location?to=URL` (a 302 to URL), `/gzip` (a body with `Content-Encoding: gzip`),
//! `/garbage` (bytes that are not HTTP), anything else `hello from IP`. With
//! [`UpstreamOptions::authorization`] set, a request without exactly that `Authorization`
//! value is answered 401. With [`UpstreamOptions::answer`] set, every request is answered
//! with exactly the bytes it returns (status line, framing, headers, body: a hostile upstream).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

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
    gate: Arc<tokio::sync::Notify>,
    task: JoinHandle<()>,
}

/// The whole answer to one request, made from its head and body: a hostile upstream that
/// controls every byte it sends.
#[derive(Clone)]
pub struct Answer(pub Arc<MakeAnswer>);

/// What makes an [`Answer`]: the request's head and body to the bytes sent back.
pub type MakeAnswer = dyn Fn(&str, &[u8]) -> Vec<u8> + Send + Sync;

impl Answer {
    /// An upstream answering every request with `make(head, body)`.
    pub fn new(make: impl Fn(&str, &[u8]) -> Vec<u8> + Send + Sync + 'static) -> Answer {
        Answer(Arc::new(make))
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Answer(..)")
    }
}

/// What a [`TlsUpstream`] serves besides its built-in paths.
#[derive(Debug, Default, Clone)]
pub struct UpstreamOptions {
    /// (path, content type, body), for example a PEP 503 package index.
    pub files: Vec<(String, String, Vec<u8>)>,
    /// The `Authorization` value every request must carry (401 otherwise).
    pub authorization: Option<String>,
    /// Answers every request instead of the built-in paths.
    pub answer: Option<Answer>,
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
        let options = UpstreamOptions {
            files,
            ..UpstreamOptions::default()
        };
        TlsUpstream::start_with(ip, port, config, options).await
    }

    /// Like [`TlsUpstream::try_start`], with `options`.
    pub async fn start_with(
        ip: IpAddr,
        port: u16,
        config: Arc<ServerConfig>,
        options: UpstreamOptions,
    ) -> std::io::Result<TlsUpstream> {
        let options = Arc::new(options);
        let gate = Arc::new(tokio::sync::Notify::new());
        let gate_for_tasks = Arc::clone(&gate);
        let listener = TcpListener::bind((ip, port)).await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let acceptor = TlsAcceptor::from(config);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let log = Arc::clone(&log);
                let options = Arc::clone(&options);
                let gate = Arc::clone(&gate_for_tasks);
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
                    let (head, body) = read_body(&mut tls, head).await;
                    log.lock().unwrap().push(Seen {
                        sni,
                        head: head.clone(),
                    });
                    let _ = serve(&mut tls, &options, &gate, &head, &body, addr.ip()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Ok(TlsUpstream {
            addr,
            seen,
            gate,
            task,
        })
    }

    /// Lets `/sse` send its second event.
    pub fn release(&self) {
        self.gate.notify_waiters();
        self.gate.notify_one();
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

/// Answers one request: the scripted answer, a 401, or a built-in path.
async fn serve<W: AsyncWriteExt + Unpin>(
    tls: &mut W,
    options: &UpstreamOptions,
    gate: &tokio::sync::Notify,
    head: &str,
    body: &[u8],
    ip: IpAddr,
) -> std::io::Result<()> {
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let authorized = options
        .authorization
        .as_ref()
        .is_none_or(|want| header(head, "authorization").is_some_and(|got| got == *want));
    let file = options.files.iter().find(|(p, _, _)| *p == path);
    let echo = format!("{head}{}", String::from_utf8_lossy(body));
    match file {
        _ if options.answer.is_some() => {
            let answer = options.answer.as_ref().map(|a| (a.0)(head, body));
            tls.write_all(&answer.unwrap_or_default()).await
        }
        _ if !authorized => {
            tls.write_all(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await
        }
        _ if path == "/hang" => {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            Ok(())
        }
        _ if path == "/sse" => sse(tls, gate).await,
        _ if path.starts_with("/echo") => echo_back(tls, &path, &echo).await,
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
        None => respond(tls, &path, ip).await,
    }
}

/// The head as text and the body its `Content-Length` announces, or a chunked body as sent
/// (read after the head).
async fn read_body<R: AsyncReadExt + Unpin>(tls: &mut R, mut head: Vec<u8>) -> (String, Vec<u8>) {
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(head.len(), |i| i + 4);
    let mut body = head.split_off(end);
    let head = String::from_utf8_lossy(&head).into_owned();
    let want = header(&head, "content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(1 << 20);
    let chunked =
        header(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let done = |body: &[u8]| {
        if chunked {
            body.ends_with(b"0\r\n\r\n") || body.len() >= 1 << 20
        } else {
            body.len() >= want
        }
    };
    let mut buf = [0u8; 4096];
    while !done(&body) {
        match tls.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    (head, body)
}

/// The value of the header `name` (lower case) in `head`.
fn header(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_owned())
    })
}

/// `/echo`: the request back as one body; `/echo-split`: as two chunks, cut inside the
/// `authorization` value, the second sent a moment later.
async fn echo_back<W: AsyncWriteExt + Unpin>(
    out: &mut W,
    path: &str,
    echo: &str,
) -> std::io::Result<()> {
    if path != "/echo-split" {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Echo-Auth: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            header(echo, "authorization").unwrap_or_default(),
            echo.len()
        );
        out.write_all(head.as_bytes()).await?;
        return out.write_all(echo.as_bytes()).await;
    }
    let cut = echo
        .to_ascii_lowercase()
        .find("authorization:")
        .map_or(echo.len() / 2, |i| (i + 24).min(echo.len()));
    out.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        .await?;
    for part in [&echo.as_bytes()[..cut], &echo.as_bytes()[cut..]] {
        out.write_all(format!("{:x}\r\n", part.len()).as_bytes())
            .await?;
        out.write_all(part).await?;
        out.write_all(b"\r\n").await?;
        out.flush().await?;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    out.write_all(b"0\r\n\r\n").await
}

/// `/sse`: one event, then a second once the test releases the gate.
async fn sse<W: AsyncWriteExt + Unpin>(
    out: &mut W,
    gate: &tokio::sync::Notify,
) -> std::io::Result<()> {
    out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        .await?;
    let event = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
    out.write_all(event("data: one\n\n").as_bytes()).await?;
    out.flush().await?;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(60), gate.notified()).await;
    out.write_all(event("data: two\n\n").as_bytes()).await?;
    out.write_all(b"0\r\n\r\n").await
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
    if let Some(to) = path.strip_prefix("/location?to=") {
        return out
            .write_all(format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes())
            .await;
    }
    if path == "/gzip" {
        return out
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\nConnection: close\r\n\r\n\x1f\x8b\x08\x00")
            .await;
    }
    if path == "/garbage" {
        return out.write_all(b"this is not HTTP at all\r\n\r\n").await;
    }
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

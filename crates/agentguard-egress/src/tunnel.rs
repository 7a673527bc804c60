//! The byte pump between client and upstream: both directions, half-close, idle timeout.
//!
//! This is the proxy's hot path. Each direction reads into a 64 KiB buffer that is allocated
//! only when data first arrives (an idle tunnel holds no buffers) and writes it all out. When
//! one side finishes sending, its FIN is passed on (`shutdown` of the other side's write half)
//! and the other direction keeps flowing. The tunnel ends when both directions are done, when
//! no byte has moved either way for the idle timeout, or when the proxy shuts down.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::sync::CancellationToken;

const BUFFER: usize = 64 * 1024;

/// How a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Both sides finished sending.
    Closed,
    /// Nothing moved either way for the idle timeout.
    IdleTimeout,
    /// A read or write failed (reset by a peer).
    Error,
    /// The proxy shut down and the grace period ended.
    Shutdown,
}

impl End {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::IdleTimeout => "idle_timeout",
            End::Error => "connection_error",
            End::Shutdown => "shutdown",
        }
    }
}

/// Bytes moved and how the tunnel ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) end: End,
}

struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn idle_deadline(&self, idle: Duration) -> tokio::time::Instant {
        let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        tokio::time::Instant::from_std(last + idle)
    }
}

async fn pipe(
    reader: OwnedReadHalf,
    mut writer: OwnedWriteHalf,
    moved: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    let mut buf = Vec::new();
    loop {
        reader.readable().await?;
        if buf.is_empty() {
            buf = vec![0u8; BUFFER];
        }
        let n = match reader.try_read(&mut buf) {
            Ok(0) => {
                // Pass the FIN on; the other direction keeps flowing.
                let _ = writer.shutdown().await;
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        writer.write_all(&buf[..n]).await?;
        moved.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    }
}

/// Pumps bytes both ways until the tunnel ends.
pub(crate) async fn run(
    client: TcpStream,
    upstream: TcpStream,
    idle: Duration,
    cancel: CancellationToken,
) -> Stats {
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let activity = Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let to_upstream = pipe(client_read, upstream_write, &up, &activity);
    let to_client = pipe(upstream_read, client_write, &down, &activity);
    tokio::pin!(to_upstream, to_client);
    let (mut up_done, mut down_done) = (false, false);
    let end = loop {
        if up_done && down_done {
            break End::Closed;
        }
        let idle_at = activity.idle_deadline(idle);
        tokio::select! {
            result = &mut to_upstream, if !up_done => {
                up_done = true;
                if result.is_err() { break End::Error; }
            }
            result = &mut to_client, if !down_done => {
                down_done = true;
                if result.is_err() { break End::Error; }
            }
            () = cancel.cancelled() => break End::Shutdown,
            () = tokio::time::sleep_until(idle_at) => {
                if tokio::time::Instant::now() >= activity.idle_deadline(idle) {
                    break End::IdleTimeout;
                }
            }
        }
    };
    Stats {
        up: up.load(Ordering::Relaxed),
        down: down.load(Ordering::Relaxed),
        end,
    }
}

//! The byte pump between client and upstream: both directions, half-close, idle timeouts.
//!
//! This is the proxy's hot path. On Linux each direction moves bytes with `splice(2)` through
//! a pipe, socket to pipe to socket, so they never cross into user space (measured in
//! docs/PERFORMANCE.md against the plain copy loop it replaced). The pipe is taken when data
//! (or the FIN) first arrives, so an idle tunnel holds no pipe and no buffer; an empty pipe is
//! kept for the next tunnel (`pipe.rs`). If a pipe cannot be created (out of file
//! descriptors), that direction falls back to a copy through a 64 KiB buffer.
//! Every write counts: the bytes moved and the tunnel's last activity are updated per write,
//! not per chunk, so a tunnel that is moving bytes to a slow reader is never idle, and the
//! byte counts are exact however the tunnel ends. When one side finishes sending, its FIN is
//! passed on (`shutdown(SHUT_WR)` of the other side) and the other direction keeps flowing,
//! for as long as it moves bytes, but no longer than the half-close timeout of silence.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::pipe::{SpliceFlags, splice};
use tokio::io::Interest;

use crate::pipe::{PIPE, Pipe};
use crate::socket::{Socket, bound_send_queue, when_ready, when_writable};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const BUFFER: usize = 64 * 1024;

/// How a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Both sides finished sending.
    Closed,
    /// Nothing moved either way for the idle timeout.
    IdleTimeout,
    /// One side finished sending and the other sent nothing for the half-close timeout.
    HalfCloseTimeout,
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
            End::HalfCloseTimeout => "half_close_timeout",
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

/// The limits of one tunnel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) idle: Duration,
    pub(crate) half_close: Duration,
}

/// The bytes one direction moved and when anything last moved either way.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn deadline(&self, limit: Duration) -> tokio::time::Instant {
        let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        tokio::time::Instant::from_std(last + limit)
    }
}

/// One direction's byte count and the shared activity clock, updated per write.
struct Meter<'a> {
    moved: &'a AtomicU64,
    activity: &'a Activity,
}

impl Meter<'_> {
    fn wrote(&self, n: usize) {
        self.moved.fetch_add(n as u64, Ordering::Relaxed);
        self.activity.touch();
    }
}

/// Passes a FIN on: no more bytes will be written to `to`.
fn finish(to: &impl AsFd) {
    let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
}

/// One direction: `from` to `to`, until `from` sends its FIN. The send queue of `to` is
/// bounded before its first write (so a direction that moves nothing costs no system call).
async fn forward(
    from: &impl Socket,
    to: &impl Socket,
    meter: Meter<'_>,
    idle: Duration,
) -> io::Result<()> {
    from.ready(Interest::READABLE).await?;
    let Ok(pipe) = Pipe::take() else {
        return copy(from, to, meter, idle).await;
    };
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    let mut bounded = false;
    loop {
        // The pipe is empty here, so EAGAIN can only mean the socket has nothing to read.
        let n = when_ready(from, Interest::READABLE, || {
            Ok(splice(from, None, &pipe.write, None, PIPE, flags)?)
        })
        .await?;
        if n == 0 {
            finish(to);
            pipe.keep();
            return Ok(());
        }
        if !std::mem::replace(&mut bounded, true) {
            bound_send_queue(to, idle);
        }
        let mut left = n;
        while left > 0 {
            let m =
                when_writable(to, || Ok(splice(&pipe.read, None, to, None, left, flags)?)).await?;
            left -= m;
            meter.wrote(m);
        }
    }
}

/// The portable fallback: a copy through a user-space buffer.
async fn copy(
    from: &impl Socket,
    to: &impl Socket,
    meter: Meter<'_>,
    idle: Duration,
) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    let mut bounded = false;
    loop {
        let n = when_ready(from, Interest::READABLE, || {
            Ok(rustix::io::read(from, &mut buf)?)
        })
        .await?;
        if n == 0 {
            finish(to);
            return Ok(());
        }
        if !std::mem::replace(&mut bounded, true) {
            bound_send_queue(to, idle);
        }
        let mut written = 0;
        while written < n {
            let m = when_writable(to, || Ok(rustix::io::write(to, &buf[written..n])?)).await?;
            written += m;
            meter.wrote(m);
        }
    }
}

/// Pumps bytes both ways until the tunnel ends.
pub(crate) async fn run(
    client: &impl Socket,
    upstream: &TcpStream,
    timeouts: Timeouts,
    cancel: &CancellationToken,
) -> Stats {
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let activity = Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let meter = |moved| Meter {
        moved,
        activity: &activity,
    };
    let to_upstream = forward(client, upstream, meter(&up), timeouts.idle);
    let to_client = forward(upstream, client, meter(&down), timeouts.idle);
    tokio::pin!(to_upstream, to_client);
    let (mut up_done, mut down_done) = (false, false);
    let end = loop {
        if up_done && down_done {
            break End::Closed;
        }
        // Once one side has finished, the other may stay silent for the half-close timeout.
        let (limit, expired) = if up_done || down_done {
            (timeouts.half_close, End::HalfCloseTimeout)
        } else {
            (timeouts.idle, End::IdleTimeout)
        };
        tokio::select! {
            result = &mut to_upstream, if !up_done => {
                up_done = true;
                activity.touch();
                if result.is_err() { break End::Error; }
            }
            result = &mut to_client, if !down_done => {
                down_done = true;
                activity.touch();
                if result.is_err() { break End::Error; }
            }
            () = cancel.cancelled() => break End::Shutdown,
            () = tokio::time::sleep_until(activity.deadline(limit)) => {
                if tokio::time::Instant::now() >= activity.deadline(limit) {
                    break expired;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream, UnixStream};
    use tokio_util::sync::CancellationToken;

    use super::{End, Timeouts, run};

    /// The pump between `client` and `upstream` in its own task, with `idle` and a long
    /// half-close timeout; the client's side is closed when the pump ends.
    fn pump(
        client: UnixStream,
        upstream: TcpStream,
        idle: Duration,
    ) -> tokio::task::JoinHandle<super::Stats> {
        let timeouts = Timeouts {
            idle,
            half_close: Duration::from_secs(30),
        };
        tokio::spawn(async move {
            let stats = run(&client, &upstream, timeouts, &CancellationToken::new()).await;
            drop(client);
            stats
        })
    }

    /// A tunnel whose client side drains slowly through a small socket buffer, while the
    /// upstream has plenty queued: every write counts as activity, so the tunnel outlives
    /// several idle timeouts while bytes move, and the counts are exact. The reader takes 1 KiB
    /// a millisecond at most, so one pipe's worth (1 MiB) takes longer than the idle timeout
    /// (activity counted per chunk fails), while a reader stalled by a loaded machine has a
    /// whole second before it would be idle.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tunnel_draining_slowly_is_not_idle_and_counts_every_byte() {
        const TOTAL: usize = 3 * 1024 * 1024;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let source = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            stream.write_all(&vec![7u8; TOTAL]).await.unwrap();
            stream.shutdown().await.unwrap();
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        });
        let upstream = TcpStream::connect(addr).await.unwrap();
        let (proxy_side, mut client) = UnixStream::pair().unwrap();
        rustix::net::sockopt::set_socket_send_buffer_size(&proxy_side, 4096).unwrap();
        rustix::net::sockopt::set_socket_recv_buffer_size(&client, 4096).unwrap();
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 1024];
            let mut total = 0;
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                match client.read(&mut buf).await {
                    Ok(0) | Err(_) => return total,
                    Ok(n) => total += n,
                }
            }
        });
        let tunnel = pump(proxy_side, upstream, Duration::from_secs(1));
        let received = reader.await.unwrap();
        let stats = tunnel.await.unwrap();
        source.abort();
        assert_eq!(received, TOTAL, "{stats:?}");
        assert_eq!(stats.down, TOTAL as u64);
        assert_ne!(stats.end, End::IdleTimeout);
    }

    /// A client that reads slowly behind an ordinary socket buffer: a UNIX socket is
    /// reported writable only once three quarters of its buffer are free, so the proxy's
    /// writes would come seconds apart (here 1.5 s) while the client keeps reading. The pump
    /// tries the write anyway while it waits, so each drained part is written, and counted
    /// as activity, as the kernel frees it: never idle while the client reads, nothing lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_reader_behind_a_large_buffer_is_not_idle_and_loses_nothing() {
        const TOTAL: usize = 1536 * 1024;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let source = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            stream.write_all(&vec![7u8; TOTAL]).await.unwrap();
            // No FIN: the upstream stays open and silent, as a keep-alive server does.
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
        });
        let upstream = TcpStream::connect(addr).await.unwrap();
        let (proxy_side, mut client) = UnixStream::pair().unwrap();
        // The kernel doubles it (and caps it at wmem_max): a few hundred KB, as by default.
        rustix::net::sockopt::set_socket_send_buffer_size(&proxy_side, 200_000).unwrap();
        let tunnel = pump(proxy_side, upstream, Duration::from_millis(500));
        // 10 KiB every 50 ms, about 200 KB/s.
        let mut buf = vec![0u8; 10 * 1024];
        let mut total = 0;
        while total < TOTAL {
            tokio::time::sleep(Duration::from_millis(50)).await;
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        drop(client);
        let stats = tunnel.await.unwrap();
        source.abort();
        assert_eq!(total, TOTAL, "the tunnel was cut while the client read");
        assert_eq!(stats.down, TOTAL as u64, "{stats:?}");
    }
}

//! The byte pump between client and upstream: both directions, half-close, idle timeout.
//!
//! This is the proxy's hot path. On Linux each direction moves bytes with `splice(2)` through
//! a pipe, socket to pipe to socket, so they never cross into user space (measured in
//! docs/PERFORMANCE.md against the plain copy loop it replaced). The pipe is created when data
//! first arrives, so an idle tunnel holds no pipe and no buffer; if a pipe cannot be created
//! (out of file descriptors), that direction falls back to a copy through a 64 KiB buffer.
//! When one side finishes sending, its FIN is passed on (`shutdown(SHUT_WR)` of the other
//! side) and the other direction keeps flowing. The tunnel ends when both directions are done,
//! when no byte has moved either way for the idle timeout, or when the proxy shuts down.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::pipe::{PipeFlags, SpliceFlags, fcntl_setpipe_size, pipe_with, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const BUFFER: usize = 64 * 1024;
/// The pipe size asked for (the kernel's default is 64 KiB; up to pipe-max-size, 1 MiB).
const PIPE: usize = 1024 * 1024;

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

/// Passes a FIN on: no more bytes will be written to `to`.
fn finish(to: &TcpStream) {
    let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
}

fn make_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    // A larger pipe means fewer system calls; the default is fine if the kernel refuses.
    let _ = fcntl_setpipe_size(&write, PIPE);
    Ok((read, write))
}

/// One direction: `from` to `to`, until `from` sends its FIN.
async fn forward(
    from: &TcpStream,
    to: &TcpStream,
    moved: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    from.readable().await?;
    let Ok((pipe_read, pipe_write)) = make_pipe() else {
        return copy(from, to, moved, activity).await;
    };
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        from.readable().await?;
        // The pipe is empty here, so EAGAIN can only mean the socket has nothing to read.
        let n = match from.try_io(Interest::READABLE, || {
            Ok(splice(from, None, &pipe_write, None, PIPE, flags)?)
        }) {
            Ok(0) => {
                finish(to);
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                Ok(splice(&pipe_read, None, to, None, left, flags)?)
            }) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        moved.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    }
}

/// The portable fallback: a copy through a user-space buffer.
async fn copy(
    from: &TcpStream,
    to: &TcpStream,
    moved: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        from.readable().await?;
        let n = match from.try_read(&mut buf) {
            Ok(0) => {
                finish(to);
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut written = 0;
        while written < n {
            to.writable().await?;
            match to.try_write(&buf[written..n]) {
                Ok(m) => written += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
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
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let activity = Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let to_upstream = forward(&client, &upstream, &up, &activity);
    let to_client = forward(&upstream, &client, &down, &activity);
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

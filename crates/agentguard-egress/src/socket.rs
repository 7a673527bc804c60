//! The sockets the tunnel pump moves bytes through (TCP or UNIX), and the two ways it waits
//! on them: for readiness, and for a write that the kernel may take before it says so.

use std::future::Future;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// A socket the pump can wait on and move bytes through: TCP or UNIX.
pub(crate) trait Socket: AsFd + Send + Sync {
    /// True for a UNIX socket, whose send buffer is all that is queued for its reader (no
    /// receive window behind it, and no autotuning: 208 KiB by default).
    const UNIX: bool;

    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! socket {
    ($type:ty, $unix:expr) => {
        impl Socket for $type {
            const UNIX: bool = $unix;

            async fn ready(&self, interest: Interest) -> io::Result<()> {
                <$type>::ready(self, interest).await.map(|_| ())
            }

            fn attempt<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, f)
            }
        }
    };
}

socket!(TcpStream, false);
socket!(UnixStream, true);

/// Retries `f` whenever `socket` says it would block, waiting for readiness in between.
pub(crate) async fn when_ready<R>(
    socket: &impl Socket,
    interest: Interest,
    mut f: impl FnMut() -> io::Result<R>,
) -> io::Result<R> {
    loop {
        socket.ready(interest).await?;
        match socket.attempt(interest, &mut f) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// What a UNIX client's send buffer is raised to, at most (the kernel also caps it at twice
/// `net.core.wmem_max`).
const UNIX_QUEUE: usize = 2 * 1024 * 1024;

/// The slowest reader the idle timeout never cuts while it reads, bytes per second.
pub(crate) const MIN_READ_RATE: u64 = 16 * 1024;

/// Bounds what the kernel queues for `socket`'s reader to what [`MIN_READ_RATE`] drains in
/// half the idle timeout. The pump cannot see that queue drain (no safe system call reports
/// it), only its own writes: with the queue bounded, a reader that takes at least
/// `MIN_READ_RATE` makes room for a write well within every idle timeout, and the last bytes
/// left queued when the upstream goes quiet are read before the tunnel could be idle. The
/// default idle timeout (300 s) allows 2.4 MB.
///
/// On TCP the bound is `TCP_NOTSENT_LOWAT`: the kernel takes a write only while fewer bytes
/// than the bound wait unsent, whatever its send buffer (on loopback it starts near 4 MB), so
/// bytes sent and not yet acknowledged, the network's share, are not held back. Lowering
/// `SO_SNDBUF` instead, as before, bounded both and cost the tunnel 10% of its throughput on
/// loopback (docs/PERFORMANCE.md); it stays as the fallback if the option is refused. A UNIX
/// socket (the relay of a `network = "egress"` run) has only its send buffer: 208 KiB by
/// default and no autotuning; it is raised toward the bound, at most [`UNIX_QUEUE`]: the
/// relay's downloads went from 0.89 to 0.98 and 1.02 of the host client's (`cargo xtask bench
/// egress`, docs/PERFORMANCE.md).
pub(crate) fn bound_send_queue<S: Socket>(socket: &S, idle: Duration) {
    let most = (idle.as_millis() as u64).saturating_mul(MIN_READ_RATE) / 2000;
    let most = usize::try_from(most).unwrap_or(usize::MAX);
    if !S::UNIX && set_unsent_bound(socket, most).is_ok() {
        return;
    }
    let Ok(now) = rustix::net::sockopt::socket_send_buffer_size(socket) else {
        return;
    };
    // A UNIX socket's buffer is all its reader has queued; a larger one (up to the bound)
    // means fewer, larger splices. TCP's own autotuning is left alone below the bound.
    let wanted = if S::UNIX { most.min(UNIX_QUEUE) } else { most };
    if now > most || (S::UNIX && now < wanted) {
        // The kernel doubles what it is asked for (and keeps a floor of about 4 KiB).
        let _ = rustix::net::sockopt::set_socket_send_buffer_size(socket, (wanted / 2).max(2048));
    }
}

/// Sets `TCP_NOTSENT_LOWAT` to `most` bytes (the kernel reads it as an `int`).
fn set_unsent_bound(socket: &impl AsFd, most: usize) -> io::Result<()> {
    let most = most.min(i32::MAX as usize) as u32;
    socket2::SockRef::from(socket).set_tcp_notsent_lowat(most)
}

/// How often a write that waits for a socket to be writable is tried anyway.
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// Retries the write `f` until `socket` takes bytes: at readiness, and also every
/// [`DRAIN_POLL`] without it. A socket is reported writable only once a third of its buffer is
/// free, and a slow reader frees that much slower than the idle timeout: while the kernel
/// drains the queue to the reader, a try moves the bytes that fit, and each is activity.
pub(crate) async fn when_writable<R>(
    socket: &impl Socket,
    mut f: impl FnMut() -> io::Result<R>,
) -> io::Result<R> {
    // Writable as far as the runtime knows (the usual case while bytes flow): write now,
    // with no timer made (arming one can cost the runtime a wakeup of its own).
    match socket.attempt(Interest::WRITABLE, &mut f) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        other => return other,
    }
    loop {
        let ready = tokio::select! {
            ready = socket.ready(Interest::WRITABLE) => { ready?; true }
            () = tokio::time::sleep(DRAIN_POLL) => false,
        };
        let attempt = if ready {
            socket.attempt(Interest::WRITABLE, &mut f)
        } else {
            f()
        };
        match attempt {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::{TcpListener, TcpStream, UnixStream};

    use super::{UNIX_QUEUE, bound_send_queue};
    use rustix::net::sockopt::{set_socket_send_buffer_size, socket_send_buffer_size};

    /// The kernel's cap on a send buffer that is asked for: twice `net.core.wmem_max`.
    fn cap() -> usize {
        let max = std::fs::read_to_string("/proc/sys/net/core/wmem_max").unwrap();
        2 * max.trim().parse::<usize>().unwrap()
    }

    /// A UNIX socket's small default buffer is raised toward the bound (with the default idle
    /// timeout, 2 MiB, or the kernel's cap); a short idle timeout lowers it instead.
    #[tokio::test]
    async fn a_unix_send_buffer_is_raised_to_the_bound_and_lowered_by_a_short_idle() {
        let (socket, _peer) = UnixStream::pair().unwrap();
        set_socket_send_buffer_size(&socket, 100_000).unwrap();
        assert!(socket_send_buffer_size(&socket).unwrap() < UNIX_QUEUE);
        bound_send_queue(&socket, Duration::from_secs(300));
        assert_eq!(
            socket_send_buffer_size(&socket).unwrap(),
            UNIX_QUEUE.min(cap())
        );
        // 1 s at 16 KiB/s, halved: 8 KiB queued at most.
        bound_send_queue(&socket, Duration::from_secs(1));
        assert_eq!(socket_send_buffer_size(&socket).unwrap(), 8192);
    }

    /// A TCP socket keeps its send buffer (on loopback the kernel starts near 4 MB) and
    /// bounds only what it has not sent: 2.4 MB with the default idle timeout, 8 KiB with 1 s.
    #[tokio::test]
    async fn a_tcp_socket_bounds_what_waits_unsent_and_keeps_its_buffer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let before = socket_send_buffer_size(&socket).unwrap();
        let unsent = || socket2::SockRef::from(&socket).tcp_notsent_lowat().unwrap();
        bound_send_queue(&socket, Duration::from_secs(300));
        assert_eq!(socket_send_buffer_size(&socket).unwrap(), before);
        assert_eq!(unsent(), 300 * 16 * 1024 / 2);
        bound_send_queue(&socket, Duration::from_secs(1));
        assert_eq!(unsent(), 8192);
        assert_eq!(socket_send_buffer_size(&socket).unwrap(), before);
    }
}

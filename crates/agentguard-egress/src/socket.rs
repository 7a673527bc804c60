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
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! socket {
    ($type:ty) => {
        impl Socket for $type {
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

socket!(TcpStream);
socket!(UnixStream);

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

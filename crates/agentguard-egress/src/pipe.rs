//! The pipes the tunnel pump splices through, one per direction, and the few empty ones kept
//! for the next tunnels: making a pipe and sizing it costs two system calls and closing it two
//! more, on every connection's path (measured in docs/PERFORMANCE.md). Only a pipe known to be
//! empty (its direction ended at a FIN after every byte spliced in was spliced out) is kept;
//! any other is closed when dropped, so no byte of one tunnel can reach another.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use rustix::pipe::{PipeFlags, fcntl_setpipe_size, pipe_with};

/// The pipe size asked for (the kernel's default is 64 KiB; up to pipe-max-size, 1 MiB).
pub(crate) const PIPE: usize = 1024 * 1024;
/// The most spare pipes (two descriptors each, counted in the reserve: `limits.rs`).
pub(crate) const SPARE_PIPES: usize = 8;

static SPARE: Mutex<Vec<Pipe>> = Mutex::new(Vec::new());

/// One direction's pipe, closed when dropped unless [`Pipe::keep`] gives it back.
pub(crate) struct Pipe {
    pub(crate) read: OwnedFd,
    pub(crate) write: OwnedFd,
}

impl Pipe {
    /// A spare pipe, or a new one (non-blocking, close-on-exec, [`PIPE`] bytes if the
    /// kernel allows).
    pub(crate) fn take() -> io::Result<Pipe> {
        if let Some(pipe) = SPARE.lock().ok().and_then(|mut spare| spare.pop()) {
            return Ok(pipe);
        }
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // A larger pipe means fewer system calls; the default is fine if the kernel refuses.
        let _ = fcntl_setpipe_size(&write, PIPE);
        Ok(Pipe { read, write })
    }

    /// Gives back a pipe that is empty: every byte spliced into it was spliced out. Only the
    /// pump's end of stream calls this; every other way a direction ends drops its pipe.
    pub(crate) fn keep(self) {
        if let Ok(mut spare) = SPARE.lock()
            && spare.len() < SPARE_PIPES
        {
            spare.push(self);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Pipe, SPARE, SPARE_PIPES};

    /// A pipe dropped while it holds bytes is closed, never handed to a later tunnel: every
    /// pipe taken afterwards (the spares, then new ones) is empty.
    #[test]
    fn a_pipe_dropped_with_bytes_in_it_is_never_taken_again() {
        for _ in 0..SPARE_PIPES {
            Pipe::take().unwrap().keep();
        }
        let full = Pipe::take().unwrap();
        assert_eq!(rustix::io::write(&full.write, b"secret").unwrap(), 6);
        drop(full);
        let mut taken = Vec::new();
        for _ in 0..2 * SPARE_PIPES {
            let pipe = Pipe::take().unwrap();
            let mut buf = [0u8; 16];
            assert_eq!(
                rustix::io::read(&pipe.read, &mut buf),
                Err(rustix::io::Errno::AGAIN),
                "a taken pipe holds bytes"
            );
            taken.push(pipe);
        }
    }

    /// However many are given back, at most [`SPARE_PIPES`] are kept.
    #[test]
    fn at_most_the_spare_count_is_kept() {
        let pipes: Vec<Pipe> = (0..SPARE_PIPES + 3)
            .map(|_| Pipe::take().unwrap())
            .collect();
        for pipe in pipes {
            pipe.keep();
        }
        assert!(SPARE.lock().unwrap().len() <= SPARE_PIPES);
    }
}

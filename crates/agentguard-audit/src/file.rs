//! The log file on disk: opened only if it is a regular file, locked per append, and read
//! from where this handle's chain ends to pick up what other writers appended.
//!
//! Many processes may append to one log. Each append takes the file's exclusive lock
//! (`flock`), looks at the file's length, and if another writer has appended since, reads and
//! verifies those lines and continues the chain from their head; then it writes its own line
//! and lets go. When nobody else wrote, that costs a lock, a `fstat` and an unlock per append.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::chain::{Chain, Key};
use crate::error::{Error, Result};
use crate::problem::{Problem, ProblemKind};
use crate::verify::Reader;

pub(crate) fn io<'a>(
    path: &'a Path,
    action: &'static str,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        path: path.to_owned(),
        action,
        source,
    }
}

/// What a non-regular file is, for the refusal.
fn kind(file_type: std::fs::FileType) -> Option<&'static str> {
    if file_type.is_file() {
        None
    } else if file_type.is_symlink() {
        Some("a symbolic link")
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_char_device() || file_type.is_block_device() {
        Some("a device")
    } else if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Opens (or creates) the log for reading and appending; anything but a regular file, a
/// symbolic link included, is refused.
pub(crate) fn open(path: &Path) -> Result<File> {
    let refuse = |what: &'static str| Error::NotRegularFile {
        path: path.to_owned(),
        what,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if let Some(what) = kind(meta.file_type()) {
                return Err(refuse(what));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path, "open")(e)),
    }
    // No following a link swapped in since, and no blocking on a FIFO; the opened file is
    // checked again, so the check and the use are the same file.
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => {
                refuse("a symbolic link")
            }
            _ => io(path, "open")(e),
        })?;
    let meta = file.metadata().map_err(io(path, "stat"))?;
    if let Some(what) = kind(meta.file_type()) {
        return Err(refuse(what));
    }
    Ok(file)
}

/// Reads `file` from byte `from` to its end through a verifier, starting `from_line` lines
/// in, with the chain state `chain` (the genesis state when `from` is 0).
fn read_from(
    path: &Path,
    file: &File,
    from: u64,
    from_line: u64,
    chain: &Chain,
) -> Result<(Chain, u64, u64)> {
    let reader = BufReader::new(At { file, offset: from });
    let mut reader = Reader::continuing(
        reader,
        chain.key.clone(),
        chain.next_seq,
        &chain.prev,
        from_line,
        from,
    );
    for item in reader.by_ref() {
        if let Err(problem) = item {
            return Err(classify(path, problem));
        }
    }
    let summary = reader.summary();
    if summary.signed && chain.key.is_none() {
        return Err(Error::KeyMismatch {
            path: path.to_owned(),
            reason: "the log is signed; supply its HMAC key to continue it".into(),
        });
    }
    let next = Chain {
        next_seq: summary.next_seq,
        prev: summary.head.clone(),
        key: chain.key.clone(),
    };
    Ok((next, summary.good_bytes, from_line + summary.events))
}

fn classify(path: &Path, problem: Problem) -> Error {
    match problem.kind {
        ProblemKind::TornTail => Error::TornTail {
            path: path.to_owned(),
            problem,
        },
        ProblemKind::MissingSignature if problem.line == 1 => Error::KeyMismatch {
            path: path.to_owned(),
            reason: "the log is not signed, so it cannot be continued with a key; start a new log to sign events".into(),
        },
        _ => Error::Corrupt {
            path: path.to_owned(),
            problem,
        },
    }
}

/// Where one handle's view of the log ends.
#[derive(Debug, Clone)]
pub(crate) struct Position {
    pub(crate) chain: Chain,
    /// The byte just past the last line verified.
    pub(crate) end: u64,
    /// Lines verified.
    pub(crate) lines: u64,
}

/// Verifies the whole existing content; the position to continue from.
pub(crate) fn resume(path: &Path, file: &File, key: Option<Key>) -> Result<Position> {
    let (chain, end, lines) = read_from(path, file, 0, 0, &Chain::new(key))?;
    Ok(Position { chain, end, lines })
}

/// Under the lock: if the file grew past `position` (another writer appended), verifies the
/// new lines and moves the position to their end.
pub(crate) fn catch_up(path: &Path, file: &File, position: &mut Position) -> Result<()> {
    let len = file.metadata().map_err(io(path, "stat"))?.len();
    if len == position.end {
        return Ok(());
    }
    if len < position.end {
        return Err(Error::Shrunk {
            path: path.to_owned(),
            expected: position.end,
            found: len,
        });
    }
    let (chain, end, lines) = read_from(path, file, position.end, position.lines, &position.chain)?;
    *position = Position { chain, end, lines };
    Ok(())
}

/// Reads a file from an offset with `pread`, leaving the shared file offset alone.
struct At<'a> {
    file: &'a File,
    offset: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

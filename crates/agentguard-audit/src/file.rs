//! The log file on disk: opened only if it is a regular file, locked per append, and read
//! from where this handle's chain ends to pick up what other writers appended.
//!
//! Many processes may append to one log. Each append takes the file's exclusive lock
//! (`flock`), looks at the file's length, and if another writer has appended since, reads the
//! last line, verifies it (canonical form, hash, signature, a number past this writer's own)
//! and continues the chain from it; then it writes its own line and lets go. When nobody else
//! wrote, that costs a lock, a `fstat` and an unlock per append. The lines between were
//! checked by the writers that wrote them, each against the head it continued from, and are
//! verified whole by every open and by `agentguard audit verify`; anything the head check
//! cannot decide (no newline at the end, a line longer than the limit, a number at or before
//! this writer's) is read and verified line by line instead, which names the problem.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::chain::{Chain, Key, MAX_LINE_BYTES};
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

/// Opens `path` for reading only if it is a regular file (a symbolic link to one is followed):
/// checked on the opened descriptor, which never blocks on a FIFO. For the readers of a log
/// (`verify`, `show`, Python's `audit.read`) and of a secret file: a FIFO would hang them, a
/// device such as `/dev/zero` would never end.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let flags = rustix::fs::OFlags::NONBLOCK;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)?;
    if let Some(what) = kind(file.metadata()?.file_type()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file"),
        ));
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
    if let Some(head) = head_line(file, position.end, len).map_err(io(path, "read"))?
        && continue_from_head(path, position, &head, len)?
    {
        return Ok(());
    }
    let (chain, end, lines) = read_from(path, file, position.end, position.lines, &position.chain)?;
    *position = Position { chain, end, lines };
    Ok(())
}

/// The last line of a file of `len` bytes that grew past `from`: where it starts and its
/// bytes, newline included; `None` when the file does not end in a newline or the line is
/// longer than a line may be (the full read names either).
fn head_line(file: &File, from: u64, len: u64) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    // Most lines are short: a small window first, then the longest line and its newline.
    for window in [4096, MAX_LINE_BYTES as u64 + 2] {
        let start = len.saturating_sub(window).max(from);
        let mut buf = vec![0; usize::try_from(len - start).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, start)?;
        if buf.last() != Some(&b'\n') {
            return Ok(None);
        }
        let body = &buf[..buf.len() - 1];
        let line_start = match body.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            // The window reaches back to where this handle's view ends: the line starts there.
            None if start == from => 0,
            None => continue,
        };
        return Ok(Some((
            start + line_start as u64,
            buf[line_start..].to_vec(),
        )));
    }
    Ok(None)
}

/// Verifies the head line `(start, bytes)` on its own and moves `position` past it; `false`
/// when the line's number does not come after this handle's (the full read decides).
fn continue_from_head(
    path: &Path,
    position: &mut Position,
    (start, line): &(u64, Vec<u8>),
    len: u64,
) -> Result<bool> {
    #[derive(serde::Deserialize)]
    struct Link {
        seq: u64,
        prev: String,
    }
    let Ok(link) = serde_json::from_slice::<Link>(line) else {
        return Ok(false);
    };
    if link.seq < position.chain.next_seq {
        return Ok(false);
    }
    let key = position.chain.key.clone();
    let mut reader = Reader::continuing(
        line.as_slice(),
        key.clone(),
        link.seq,
        &link.prev,
        link.seq,
        *start,
    );
    for item in reader.by_ref() {
        if let Err(problem) = item {
            return Err(classify(path, problem));
        }
    }
    let summary = reader.summary();
    if summary.events != 1 {
        return Ok(false);
    }
    if summary.signed && key.is_none() {
        return Err(Error::KeyMismatch {
            path: path.to_owned(),
            reason: "the log is signed; supply its HMAC key to continue it".into(),
        });
    }
    *position = Position {
        chain: Chain {
            next_seq: summary.next_seq,
            prev: summary.head.clone(),
            key,
        },
        end: len,
        lines: link.seq + 1,
    };
    Ok(true)
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

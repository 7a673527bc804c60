//! The JSONL file log: one sealed record per line, appended by many threads and many
//! processes at once.
//!
//! # Wire format
//!
//! One JSON object per line, fields in this order:
//! `{"v":1,"seq":N,"ts":"RFC3339 ms Z","kind":"...","decision":"allow|deny|error",
//! "reason":"code","subject":{...},"data":{...},"prev":"hex","hash":"hex"[,"hmac":"hex"]}`.
//! `hash` is the SHA-256 of the canonical form of every field but `hash` and `hmac` (see the
//! chain module); `prev` is the previous line's `hash`. docs/audit.md is the full reference.
//!
//! # Durability and concurrency
//!
//! Within a process a mutex orders appends; across processes the file's exclusive lock does
//! (see the file module): an append takes the lock, continues the chain from whatever another
//! writer appended since, seals and writes its line, so lines never interleave and sequence
//! numbers never repeat. The lock is a lease: it stays with this handle while it keeps
//! appending, and a background thread gives it back after 1 ms without an append, or after
//! 10 ms in any case, so a handle that appends alone pays no lock system call per event and
//! another writer waits at most that long. In buffered mode the lease lasts until the buffer
//! is written (the flush interval), since buffered lines are sealed before they are written.
//! In fsync mode the fsync happens outside both, and concurrent writers of this handle share
//! it (group commit).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::commit::{GroupCommit, lock};
use crate::digest::sha256_hex;
use crate::error::{Error, Result};
use crate::event::{Decision, Event, Kind};
use crate::file::{Position, catch_up, io, open, resume};
use crate::options::{Durability, LogOptions, Repair};
use crate::sink::{Attempt, AuditSink, Receipt};

/// How much buffered mode keeps before it writes without waiting for the interval.
const BUFFER: usize = 64 * 1024;
/// The lease on the file's lock ends this long after the last append...
const LEASE_IDLE: Duration = Duration::from_millis(1);
/// ...and this long after it began, whatever the appends.
const LEASE_MAX: Duration = Duration::from_millis(10);

/// An append-only, hash-chained JSONL audit log.
pub struct AuditLog {
    inner: Arc<Inner>,
    flusher: Option<JoinHandle<()>>,
}

struct Inner {
    path: PathBuf,
    durability: Durability,
    flush_interval: Duration,
    state: Mutex<State>,
    /// Wakes the lease thread when this handle takes the lock, and at drop.
    lease: Condvar,
    commit: GroupCommit,
}

struct State {
    file: File,
    position: Position,
    /// Sealed lines not yet written (buffered mode).
    pending: Vec<u8>,
    /// When this handle took the file's lock, while it holds it.
    locked: Option<Instant>,
    last_append: Instant,
    poisoned: Option<String>,
    stop: bool,
}

impl AuditLog {
    /// Opens (or creates) a log and continues its chain.
    ///
    /// The file must be a regular file ([`Error::NotRegularFile`] otherwise). The existing
    /// content is verified first, under the file's lock. A torn last line (a crash mid-write)
    /// is refused with [`Error::TornTail`]: call [`AuditLog::repair`]. Any other problem is
    /// refused with [`Error::Corrupt`], since appending to a tampered log would hide the
    /// tampering. Other processes may have the same log open and append to it too.
    pub fn open(path: impl AsRef<Path>, options: LogOptions) -> Result<AuditLog> {
        let path = path.as_ref();
        let file = open(path)?;
        file.lock().map_err(io(path, "lock"))?;
        let position = resume(path, &file, options.key.clone());
        file.unlock().map_err(io(path, "unlock"))?;
        AuditLog::from_parts(path, file, position?, options)
    }

    fn from_parts(
        path: &Path,
        file: File,
        position: Position,
        options: LogOptions,
    ) -> Result<AuditLog> {
        let sync_file = file.try_clone().map_err(io(path, "open"))?;
        let next = position.chain.next_seq;
        let inner = Arc::new(Inner {
            path: path.to_owned(),
            durability: options.durability,
            flush_interval: options.flush_interval,
            state: Mutex::new(State {
                file,
                position,
                pending: Vec::new(),
                locked: None,
                last_append: Instant::now(),
                poisoned: None,
                stop: false,
            }),
            lease: Condvar::new(),
            commit: GroupCommit::new(path.to_owned(), sync_file, next),
        });
        let worker = Arc::clone(&inner);
        let flusher = std::thread::Builder::new()
            .name("audit-lease".into())
            .spawn(move || worker.lease_loop())
            .map_err(io(path, "start the lease thread"))?;
        Ok(AuditLog {
            inner,
            flusher: Some(flusher),
        })
    }

    /// Repairs a torn last line left by a crash, and records that it did so: a line that is
    /// a complete, verifying record lacking only its newline gets the newline back (a record
    /// that verifies is never removed); anything else torn is truncated.
    ///
    /// An intact log is left as it is. A log with any other problem is refused
    /// ([`Error::Corrupt`]): only a torn tail is a crash artefact; anything else is evidence.
    pub fn repair(path: impl AsRef<Path>, options: LogOptions) -> Result<Repair> {
        let path = path.as_ref();
        let mut file = open(path)?;
        file.lock().map_err(io(path, "lock"))?;
        let problem = match resume(path, &file, options.key.clone()) {
            Ok(_) => {
                return Ok(Repair {
                    removed_bytes: 0,
                    line: None,
                    recorded_seq: None,
                    completed: false,
                });
            }
            Err(Error::TornTail { problem, .. }) => problem,
            Err(other) => return Err(other),
        };
        let mut tail = Vec::new();
        file.seek(SeekFrom::Start(problem.offset))
            .map_err(io(path, "read"))?;
        file.read_to_end(&mut tail).map_err(io(path, "read"))?;
        let completed = completes(path, &file, options.key.clone())?;
        if completed {
            file.write_all(b"\n").map_err(io(path, "write"))?;
        } else {
            file.set_len(problem.offset).map_err(io(path, "truncate"))?;
        }
        file.sync_all().map_err(io(path, "fsync"))?;
        let position = resume(path, &file, options.key.clone())?;
        file.unlock().map_err(io(path, "unlock"))?;
        let log = AuditLog::from_parts(path, file, position, options)?;
        let event = if completed {
            Event::new(Kind::LogRepaired, Decision::Allow, "torn_tail_completed")
                .data("added_bytes", 1u64)
        } else {
            Event::new(Kind::LogRepaired, Decision::Allow, "torn_tail_truncated")
                .data("removed_bytes", tail.len() as u64)
                .data("removed_sha256", sha256_hex(&tail))
        };
        let receipt = log.record(
            event
                .subject("path", path.to_string_lossy().as_ref())
                .data("line", problem.line),
        )?;
        log.sync()?;
        Ok(Repair {
            removed_bytes: if completed { 0 } else { tail.len() as u64 },
            line: Some(problem.line),
            recorded_seq: Some(receipt.seq),
            completed,
        })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Writes buffered events to the operating system.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Writes buffered events and syncs them to stable storage.
    pub fn sync(&self) -> Result<()> {
        self.inner.flush()?;
        self.inner
            .commit
            .sync_upto(self.inner.commit.written_so_far())
    }
}

/// True when the whole log, with a newline added at its end, verifies: its torn last line is
/// a complete record that lacks only the newline.
fn completes(path: &Path, file: &File, key: Option<crate::chain::Key>) -> Result<bool> {
    let mut whole = file.try_clone().map_err(io(path, "read"))?;
    whole.seek(SeekFrom::Start(0)).map_err(io(path, "read"))?;
    let reader = std::io::BufReader::new(whole.chain(&b"\n"[..]));
    Ok(crate::verify::verify(reader, key).is_ok())
}

impl AuditSink for AuditLog {
    fn record(&self, event: Event) -> Result<Receipt> {
        self.inner.record(event)
    }

    /// At once in flush and buffered modes while neither the mutex nor the file lock is held.
    fn try_record_now(&self, event: Event) -> Attempt {
        self.inner.try_record_now(event)
    }
}

impl Inner {
    fn poisoned(&self, cause: &str) -> Error {
        Error::Poisoned {
            path: self.path.clone(),
            cause: cause.to_owned(),
        }
    }

    fn poison(&self, state: &mut State, cause: String) -> Error {
        state.poisoned.get_or_insert(cause.clone());
        // The lock must not outlive a failure: other writers would wait forever.
        self.release(state);
        self.poisoned(&cause)
    }

    /// Takes the file's lock (waiting for another writer's lease to end, unless `wait` is
    /// false: then `Ok(false)`) and picks up the lines other writers appended since this
    /// handle's last one.
    fn acquire(&self, state: &mut State, wait: bool) -> Result<bool> {
        if state.locked.is_some() {
            return Ok(true);
        }
        if wait {
            state.file.lock().map_err(io(&self.path, "lock"))?;
        } else {
            match state.file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
                Err(std::fs::TryLockError::Error(e)) => return Err(io(&self.path, "lock")(e)),
            }
        }
        state.locked = Some(Instant::now());
        self.lease.notify_one();
        let State { file, position, .. } = state;
        if let Err(e) = catch_up(&self.path, file, position) {
            self.release(state);
            return Err(e);
        }
        self.commit.written(state.position.chain.next_seq);
        Ok(true)
    }

    fn release(&self, state: &mut State) {
        if state.locked.take().is_some() {
            let _ = state.file.unlock();
        }
    }

    fn record(&self, event: Event) -> Result<Receipt> {
        let sealed = self.append(&mut lock(&self.state), event)?;
        if self.durability == Durability::Fsync {
            self.commit.sync_upto(sealed.seq + 1)?;
        }
        Ok(Receipt {
            seq: sealed.seq,
            hash: sealed.hash,
        })
    }

    fn try_record_now(&self, event: Event) -> Attempt {
        if self.durability == Durability::Fsync {
            return Attempt::WouldWait(event);
        }
        let mut state = match self.state.try_lock() {
            Ok(state) => state,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Attempt::WouldWait(event),
        };
        if state.poisoned.is_none() {
            match self.acquire(&mut state, false) {
                Ok(true) => {}
                Ok(false) => return Attempt::WouldWait(event),
                Err(e) => return Attempt::Done(Err(e)),
            }
        }
        Attempt::Done(self.append(&mut state, event).map(|sealed| Receipt {
            seq: sealed.seq,
            hash: sealed.hash,
        }))
    }

    /// Seals `event` and writes it (or buffers it), taking the file's lock if need be.
    fn append(&self, state: &mut State, event: Event) -> Result<crate::chain::Sealed> {
        if let Some(cause) = &state.poisoned {
            return Err(self.poisoned(cause));
        }
        self.acquire(state, true)?;
        let sealed = match state.position.chain.seal(&event, SystemTime::now()) {
            Ok(sealed) => sealed,
            Err(e) => {
                if state.pending.is_empty() {
                    self.release(state);
                }
                return Err(e);
            }
        };
        state.position.end += sealed.line.len() as u64;
        state.position.lines += 1;
        state.last_append = Instant::now();
        state.pending.extend_from_slice(sealed.line.as_bytes());
        if self.durability != Durability::Buffered || state.pending.len() >= BUFFER {
            self.write_pending(state, false)?;
        }
        Ok(sealed)
    }

    /// Writes the sealed lines, and with `release`, lets go of the lock.
    fn write_pending(&self, state: &mut State, release: bool) -> Result<()> {
        if !state.pending.is_empty() {
            let pending = std::mem::take(&mut state.pending);
            if let Err(e) = state.file.write_all(&pending) {
                return Err(self.poison(state, format!("write: {e}")));
            }
            self.commit.written(state.position.chain.next_seq);
        }
        if release {
            self.release(state);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut state = lock(&self.state);
        if let Some(cause) = &state.poisoned {
            return Err(self.poisoned(cause));
        }
        self.write_pending(&mut state, true)
    }

    /// When the lease on the lock ends: the flush interval for buffered lines, otherwise 1 ms
    /// after the last append and 10 ms after it began.
    fn lease_end(&self, state: &State, since: Instant) -> Instant {
        if self.durability == Durability::Buffered {
            since + self.flush_interval
        } else {
            (state.last_append + LEASE_IDLE).min(since + LEASE_MAX)
        }
    }

    /// Gives the lock back when the lease ends (writing buffered lines first).
    fn lease_loop(&self) {
        let mut state = lock(&self.state);
        while !state.stop {
            let Some(since) = state.locked else {
                state = self
                    .lease
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            };
            let end = self.lease_end(&state, since);
            let now = Instant::now();
            if now >= end {
                // A failure poisons the log; the next `record` reports it.
                let _ = self.write_pending(&mut state, true);
                continue;
            }
            state = self
                .lease
                .wait_timeout(state, end - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        lock(&self.inner.state).stop = true;
        self.inner.lease.notify_all();
        if let Some(handle) = self.flusher.take() {
            let _ = handle.join();
        }
        // Best effort: buffered events reach the file; in fsync mode they were synced already.
        let _ = self.inner.flush();
    }
}

//! The JSONL file log: one sealed record per line, appended by many threads at once.
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
//! A mutex orders appends: sealing (sequence number, timestamp, hash) and writing a line
//! happen under it, so lines never interleave and sequence numbers never repeat. What
//! `record` waits for after that depends on [`Durability`]. In fsync mode the fsync happens
//! outside the mutex, and concurrent writers share it (group commit): one thread syncs
//! everything written so far while the others wait for a sync that covers their line.
//! An exclusive `flock` keeps a second process from appending to the same file.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::chain::{Chain, Key, sha256_hex};
use crate::error::{Error, Result};
use crate::event::{Decision, Event, Kind};
use crate::options::{Durability, LogOptions, Repair};
use crate::problem::ProblemKind;
use crate::sink::{AuditSink, Receipt};
use crate::verify::Reader;

/// An append-only, hash-chained JSONL audit log.
pub struct AuditLog {
    inner: Arc<Inner>,
    flusher: Option<JoinHandle<()>>,
}

struct Inner {
    path: PathBuf,
    durability: Durability,
    state: Mutex<State>,
    /// A second handle on the file, so fsync runs without holding the append mutex.
    sync_file: File,
    /// One past the highest sequence number whose line has reached the operating system.
    written: AtomicU64,
    sync: Mutex<SyncState>,
    synced: Condvar,
    stop: Mutex<bool>,
    stop_signal: Condvar,
}

struct State {
    chain: Chain,
    out: BufWriter<File>,
    dirty: bool,
    poisoned: Option<String>,
}

struct SyncState {
    /// One past the highest sequence number known to be on stable storage.
    synced: u64,
    syncing: bool,
    error: Option<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        path: path.to_owned(),
        action,
        source,
    }
}

fn open_locked(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(io(path, "open"))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            path: path.to_owned(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io(path, "lock")(e)),
    }
}

/// Verifies the existing content and returns the chain to continue.
fn resume(path: &Path, file: &File, key: Option<Key>) -> Result<Chain> {
    // The clone shares the file offset; read from the start whatever was done before.
    let mut handle = file.try_clone().map_err(io(path, "open"))?;
    handle.seek(SeekFrom::Start(0)).map_err(io(path, "read"))?;
    let mut reader = Reader::new(BufReader::new(handle), key.clone());
    for item in reader.by_ref() {
        if let Err(problem) = item {
            return Err(match problem.kind {
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
            });
        }
    }
    let summary = reader.summary();
    if summary.signed && key.is_none() {
        return Err(Error::KeyMismatch {
            path: path.to_owned(),
            reason: "the log is signed; supply its HMAC key to continue it".into(),
        });
    }
    Ok(Chain {
        next_seq: summary.next_seq,
        prev: summary.head.clone(),
        key,
    })
}

impl AuditLog {
    /// Opens (or creates) a log and continues its chain.
    ///
    /// The existing content is verified first. A torn last line (a crash mid-write) is refused
    /// with [`Error::TornTail`]: call [`AuditLog::repair`]. Any other problem is refused with
    /// [`Error::Corrupt`], since appending to a tampered log would hide the tampering.
    pub fn open(path: impl AsRef<Path>, options: LogOptions) -> Result<AuditLog> {
        let path = path.as_ref();
        let file = open_locked(path)?;
        AuditLog::from_locked(path, file, options)
    }

    fn from_locked(path: &Path, file: File, options: LogOptions) -> Result<AuditLog> {
        let chain = resume(path, &file, options.key.clone())?;
        let sync_file = file.try_clone().map_err(io(path, "open"))?;
        let next = chain.next_seq;
        let inner = Arc::new(Inner {
            path: path.to_owned(),
            durability: options.durability,
            state: Mutex::new(State {
                chain,
                out: BufWriter::with_capacity(64 * 1024, file),
                dirty: false,
                poisoned: None,
            }),
            sync_file,
            written: AtomicU64::new(next),
            sync: Mutex::new(SyncState {
                synced: next,
                syncing: false,
                error: None,
            }),
            synced: Condvar::new(),
            stop: Mutex::new(false),
            stop_signal: Condvar::new(),
        });
        let flusher = if options.durability == Durability::Buffered {
            let worker = Arc::clone(&inner);
            let interval = options.flush_interval;
            let handle = std::thread::Builder::new()
                .name("audit-flush".into())
                .spawn(move || worker.flush_loop(interval))
                .map_err(io(path, "start the flush thread"))?;
            Some(handle)
        } else {
            None
        };
        Ok(AuditLog { inner, flusher })
    }

    /// Truncates a torn last line left by a crash, and records that it did so.
    ///
    /// An intact log is left as it is. A log with any other problem is refused
    /// ([`Error::Corrupt`]): only a torn tail is a crash artefact; anything else is evidence.
    pub fn repair(path: impl AsRef<Path>, options: LogOptions) -> Result<Repair> {
        let path = path.as_ref();
        let mut file = open_locked(path)?;
        match resume(path, &file, options.key.clone()) {
            Ok(_) => Ok(Repair {
                removed_bytes: 0,
                line: None,
                recorded_seq: None,
            }),
            Err(Error::TornTail { problem, .. }) => {
                let mut tail = Vec::new();
                file.seek(SeekFrom::Start(problem.offset))
                    .map_err(io(path, "read"))?;
                file.read_to_end(&mut tail).map_err(io(path, "read"))?;
                file.set_len(problem.offset).map_err(io(path, "truncate"))?;
                file.sync_all().map_err(io(path, "fsync"))?;
                let log = AuditLog::from_locked(path, file, options)?;
                let receipt = log.record(
                    Event::new(Kind::LogRepaired, Decision::Allow, "torn_tail_truncated")
                        .subject("path", path.to_string_lossy().as_ref())
                        .data("line", problem.line)
                        .data("removed_bytes", tail.len() as u64)
                        .data("removed_sha256", sha256_hex(&tail)),
                )?;
                log.sync()?;
                Ok(Repair {
                    removed_bytes: tail.len() as u64,
                    line: Some(problem.line),
                    recorded_seq: Some(receipt.seq),
                })
            }
            Err(other) => Err(other),
        }
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
        let target = {
            let state = lock(&self.inner.state);
            state.chain.next_seq
        };
        self.inner.flush()?;
        self.inner.sync_upto(target)
    }
}

impl AuditSink for AuditLog {
    fn record(&self, event: Event) -> Result<Receipt> {
        self.inner.record(event)
    }
}

impl Inner {
    fn poison(&self, state: &mut State, cause: String) -> Error {
        state.poisoned.get_or_insert(cause.clone());
        Error::Poisoned {
            path: self.path.clone(),
            cause,
        }
    }

    fn record(&self, event: Event) -> Result<Receipt> {
        let sealed = {
            let mut state = lock(&self.state);
            if let Some(cause) = &state.poisoned {
                return Err(Error::Poisoned {
                    path: self.path.clone(),
                    cause: cause.clone(),
                });
            }
            let sealed = state.chain.seal(&event, SystemTime::now());
            if let Err(e) = state.out.write_all(sealed.line.as_bytes()) {
                return Err(self.poison(&mut state, format!("write: {e}")));
            }
            if self.durability == Durability::Buffered {
                state.dirty = true;
            } else {
                if let Err(e) = state.out.flush() {
                    return Err(self.poison(&mut state, format!("write: {e}")));
                }
                self.written.store(sealed.seq + 1, Ordering::Release);
            }
            sealed
        };
        if self.durability == Durability::Fsync {
            self.sync_upto(sealed.seq + 1)?;
        }
        Ok(Receipt {
            seq: sealed.seq,
            hash: sealed.hash,
        })
    }

    fn flush(&self) -> Result<()> {
        let mut state = lock(&self.state);
        if let Some(cause) = &state.poisoned {
            return Err(Error::Poisoned {
                path: self.path.clone(),
                cause: cause.clone(),
            });
        }
        if let Err(e) = state.out.flush() {
            return Err(self.poison(&mut state, format!("write: {e}")));
        }
        state.dirty = false;
        self.written.store(state.chain.next_seq, Ordering::Release);
        Ok(())
    }

    /// Returns once every event below `target` is on stable storage, sharing syncs with
    /// concurrent callers: whoever finds no sync running starts one covering everything
    /// written so far; the others wait for it.
    fn sync_upto(&self, target: u64) -> Result<()> {
        let mut sync = lock(&self.sync);
        loop {
            if sync.synced >= target {
                return Ok(());
            }
            if let Some(cause) = &sync.error {
                return Err(Error::Poisoned {
                    path: self.path.clone(),
                    cause: cause.clone(),
                });
            }
            if sync.syncing {
                sync = self
                    .synced
                    .wait(sync)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            sync.syncing = true;
            drop(sync);
            let covered = self.written.load(Ordering::Acquire);
            let result = self.sync_file.sync_data();
            sync = lock(&self.sync);
            sync.syncing = false;
            match result {
                Ok(()) => sync.synced = sync.synced.max(covered),
                Err(e) => {
                    sync.error.get_or_insert(format!("fsync: {e}"));
                }
            }
            self.synced.notify_all();
        }
    }

    fn flush_loop(&self, interval: Duration) {
        let mut stop = lock(&self.stop);
        loop {
            let (guard, _) = self
                .stop_signal
                .wait_timeout(stop, interval)
                .unwrap_or_else(PoisonError::into_inner);
            stop = guard;
            if *stop {
                return;
            }
            let dirty = lock(&self.state).dirty;
            if dirty {
                // A failure poisons the log; the next `record` reports it.
                let _ = self.flush();
            }
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        *lock(&self.inner.stop) = true;
        self.inner.stop_signal.notify_all();
        if let Some(handle) = self.flusher.take() {
            let _ = handle.join();
        }
        // Best effort: buffered events reach the file; in fsync mode they were synced already.
        let _ = self.inner.flush();
    }
}

//! Group commit for fsync durability: concurrent writers share each `fdatasync`.
//!
//! Whoever finds no sync running starts one covering everything written so far; the others
//! wait on a condition variable for a sync that covers their line. The counters are sequence
//! numbers: `written` is one past the highest sequence number whose line has reached the
//! operating system (this handle's lines, and other writers' lines it has read), `synced` one
//! past the highest known to be on stable storage.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::{Error, Result};

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

struct SyncState {
    synced: u64,
    syncing: bool,
    error: Option<String>,
}

/// The shared fsync of one log handle.
pub(crate) struct GroupCommit {
    path: PathBuf,
    /// A second handle on the file, so fsync runs without holding the append mutex.
    file: File,
    written: AtomicU64,
    state: Mutex<SyncState>,
    synced: Condvar,
}

impl GroupCommit {
    /// Starts with everything below `next` written and synced (it was read from the file).
    pub(crate) fn new(path: PathBuf, file: File, next: u64) -> GroupCommit {
        GroupCommit {
            path,
            file,
            written: AtomicU64::new(next),
            state: Mutex::new(SyncState {
                synced: next,
                syncing: false,
                error: None,
            }),
            synced: Condvar::new(),
        }
    }

    /// Every line below `next` has reached the operating system.
    pub(crate) fn written(&self, next: u64) {
        self.written.fetch_max(next, Ordering::AcqRel);
    }

    /// One past the highest sequence number written.
    pub(crate) fn written_so_far(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Returns once every event below `target` is on stable storage.
    pub(crate) fn sync_upto(&self, target: u64) -> Result<()> {
        let mut sync = lock(&self.state);
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
            let result = self.file.sync_data();
            sync = lock(&self.state);
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
}

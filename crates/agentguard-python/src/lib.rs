//! `agentguard._native`: the Python package's native module, a thin layer of conversions over
//! the Rust crates (no logic of its own).
//!
//! Each class holds the Rust value a CLI command would build: `Executor` a loaded
//! configuration's `Sandbox`, `Fetcher` netpin's `Fetcher`, `Proxy` a `BlockingEgressProxy`;
//! `verify` and `read` are the audit crate's reader. Every blocking call releases the GIL
//! (`Python::detach`); errors become the exceptions of `agentguard.errors` (`errors.rs`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use pyo3::prelude::*;

mod audit;
mod errors;
mod executor;
mod fetcher;
mod proxy;

/// The process whose agentguard threads exist (the runtime's, a proxy's, an audit log's): 0
/// until the first object that starts one. A child made by `fork()` has none of them, only
/// the parent's memory (its locks possibly held, its signal pipe shared), so it may not use
/// anything made before the fork.
static THREADS_OF: AtomicU32 = AtomicU32::new(0);

/// True in a process forked from the one whose agentguard threads the objects rely on.
pub(crate) fn forked() -> bool {
    let owner = THREADS_OF.load(Ordering::SeqCst);
    owner != 0 && owner != std::process::id()
}

/// Refuses, with an exception that says what to do, any use in a forked child; otherwise
/// marks this process as the one whose threads the objects about to be made rely on.
pub(crate) fn this_process(py: Python<'_>) -> PyResult<()> {
    let pid = std::process::id();
    match THREADS_OF.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => Ok(()),
        Err(owner) if owner == pid => Ok(()),
        Err(owner) => Err(errors::raise(
            py,
            "AgentGuardError",
            format!(
                "agentguard was started in process {owner} and this process ({pid}) was forked from it: its runtime and proxy threads do not exist here, so nothing made before the fork can run. Use multiprocessing's \"spawn\" or \"forkserver\" start method, or make the agentguard objects only in the child"
            ),
            "forked",
        )),
    }
}

/// A value dropped only in the process that made it: a forked child forgets it, since the
/// threads its drop would wait for (a proxy's, an audit log's, the runtime's) are not there.
pub(crate) struct Owned<T>(Option<T>);

impl<T> Owned<T> {
    pub(crate) fn new(value: T) -> Owned<T> {
        Owned(Some(value))
    }
}

impl<T> std::ops::Deref for Owned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // Some from `new` until `drop` takes it; nothing derefs after that.
        self.0
            .as_ref()
            .expect("an Owned value is set until it is dropped")
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if forked()
            && let Some(value) = self.0.take()
        {
            std::mem::forget(value);
        }
    }
}

/// The one runtime every run and fetch of this process is awaited on. Runs from several
/// Python threads block on it side by side.
fn runtime(py: Python<'_>) -> PyResult<&'static tokio::runtime::Runtime> {
    this_process(py)?;
    static RUNTIME: OnceLock<std::io::Result<tokio::runtime::Runtime>> = OnceLock::new();
    let built = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("agentguard")
            .enable_all()
            .build()
    });
    built.as_ref().map_err(|e| {
        errors::raise(
            py,
            "EngineError",
            format!("starting the async runtime: {e}"),
            "runtime_failed",
        )
    })
}

/// The module: its classes and functions.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<executor::Executor>()?;
    module.add_class::<executor::CancelToken>()?;
    module.add_class::<fetcher::Fetcher>()?;
    module.add_class::<proxy::Proxy>()?;
    module.add_function(wrap_pyfunction!(audit::verify, module)?)?;
    module.add_function(wrap_pyfunction!(audit::read, module)?)?;
    module.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! `agentguard._native`: the Python package's native module, a thin layer of conversions over
//! the Rust crates (no logic of its own).
//!
//! Each class holds the Rust value a CLI command would build: `Executor` a loaded
//! configuration's `Sandbox`, `Fetcher` netpin's `Fetcher`, `Proxy` a `BlockingEgressProxy`;
//! `verify` and `read` are the audit crate's reader. Every blocking call releases the GIL
//! (`Python::detach`); errors become the exceptions of `agentguard.errors` (`errors.rs`).

use std::sync::OnceLock;

use pyo3::prelude::*;

mod audit;
mod errors;
mod executor;
mod fetcher;
mod proxy;

/// The one runtime every run and fetch of this process is awaited on. Runs from several
/// Python threads block on it side by side.
fn runtime(py: Python<'_>) -> PyResult<&'static tokio::runtime::Runtime> {
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

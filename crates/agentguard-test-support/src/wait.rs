//! Bounded waits on a condition the test cannot be told about (a fake container appears, an
//! audit event is written, a Job is created): the one poll loop of the test suites, with a
//! deadline and a message naming what never happened.

use std::time::{Duration, Instant};

/// How often a condition is looked at.
const EVERY: Duration = Duration::from_millis(10);

/// Waits until `probe` returns `Some`, for at most `limit`, and returns its value; past the
/// limit the test fails, naming `what`.
pub async fn eventually<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "never within {limit:?}: {what}");
        tokio::time::sleep(EVERY).await;
    }
}

/// [`eventually`] for a test without an async runtime.
pub fn eventually_blocking<T>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "never within {limit:?}: {what}");
        std::thread::sleep(EVERY);
    }
}

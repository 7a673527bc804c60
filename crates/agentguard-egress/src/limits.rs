//! The limits of a proxy (`Limits`, checked before it binds), and file descriptors: the proxy raises its soft limit to the hard one, and derives its default
//! connection cap from the result, so it answers 503 at the cap instead of running out.
//!
//! A tunnel holds up to six descriptors: the client's socket, the upstream's, and a pipe
//! (two descriptors) per direction once bytes flow; an idle tunnel holds two. The cap leaves
//! a reserve for everything else (the listener, the audit log, resolver sockets, stdio, the
//! few empty pipes kept for the next tunnels).

use std::time::Duration;

use agentguard_netpin::DEFAULT_MAX_ANSWERS;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use crate::error::{Error, Result};

/// The most descriptors one tunnel holds.
pub const DESCRIPTORS_PER_TUNNEL: u64 = 6;
/// Descriptors kept for the rest of the process, and for the spare pipes the tunnels keep for
/// their successors (two descriptors each).
pub const RESERVED_DESCRIPTORS: u64 = 64 + 2 * crate::pipe::SPARE_PIPES as u64;
/// The cap when the limit is unlimited.
const UNLIMITED_CAP: usize = 1 << 20;

/// The longest any timeout may be: longer ones would only overflow a clock.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most connections a proxy accepts to handle at once.
pub const MAX_CONNECTIONS: usize = 1 << 20;

/// The limits of one proxy, with their defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) head_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) half_close_timeout: Duration,
    /// `None`: derived from the descriptor limit at start.
    pub(crate) max_connections: Option<usize>,
    pub(crate) max_head_bytes: usize,
    pub(crate) max_answers: usize,
    pub(crate) sni_check: bool,
    /// An observe run: a CONNECT (or a route request's method and path) the policy would
    /// refuse is let through when every address is public, and recorded as `observed`.
    pub(crate) observe: bool,
    /// How long a route's upstream may take to send its response head.
    pub(crate) response_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            half_close_timeout: Duration::from_secs(5),
            max_connections: None,
            max_head_bytes: 8 * 1024,
            max_answers: DEFAULT_MAX_ANSWERS,
            sni_check: true,
            observe: false,
            response_timeout: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// Names the first limit with an unusable value.
    pub(crate) fn validate(&self) -> Result<()> {
        let refuse = |field: &'static str, reason: String| Err(Error::Limit { field, reason });
        if let Some(n) = self.max_connections
            && !(1..=MAX_CONNECTIONS).contains(&n)
        {
            return refuse(
                "max_connections",
                format!("must be from 1 to {MAX_CONNECTIONS}, not {n}"),
            );
        }
        if self.max_head_bytes < 64 {
            return refuse("max_head_bytes", "must be at least 64 bytes".into());
        }
        for (field, value) in [
            ("head_timeout", self.head_timeout),
            ("connect_timeout", self.connect_timeout),
            ("idle_timeout", self.idle_timeout),
            ("half_close_timeout", self.half_close_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if value.is_zero() || value > MAX_TIMEOUT {
                return refuse(
                    field,
                    format!(
                        "must be longer than zero and at most {} s",
                        MAX_TIMEOUT.as_secs()
                    ),
                );
            }
        }
        Ok(())
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (where it is lower) and returns the soft
/// limit now in force (`None` for unlimited).
pub fn raise_nofile_limit() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return limit.maximum;
        }
    }
    limit.current
}

/// The connection cap a descriptor limit affords (at least 1).
pub fn connections_for(nofile: Option<u64>) -> usize {
    match nofile {
        None => UNLIMITED_CAP,
        Some(n) => {
            let cap = n.saturating_sub(RESERVED_DESCRIPTORS) / DESCRIPTORS_PER_TUNNEL;
            usize::try_from(cap)
                .unwrap_or(UNLIMITED_CAP)
                .clamp(1, UNLIMITED_CAP)
        }
    }
}

/// The connections every proxy of this process draws from, together: one descriptor budget
/// per process, so that many proxies in one process (one per egress run of `agentguard mcp`,
/// of the Python package) can never flood it into failing everything else. The budget is
/// [`connections_for`] the raised descriptor limit, which keeps [`RESERVED_DESCRIPTORS`] for
/// the rest of the process: engine clients and their kills, the audit log, the transport.
/// A proxy given an explicit `max_connections` has its own cap instead.
#[derive(Debug, Clone)]
pub struct ConnectionBudget(std::sync::Arc<tokio::sync::Semaphore>);

impl ConnectionBudget {
    /// A budget of `connections` (for a test, or a host that divides its descriptors itself).
    pub fn new(connections: usize) -> ConnectionBudget {
        ConnectionBudget(std::sync::Arc::new(tokio::sync::Semaphore::new(
            connections.clamp(1, UNLIMITED_CAP),
        )))
    }

    /// The one budget of this process, made on first use (raising the soft descriptor limit).
    pub fn process() -> ConnectionBudget {
        static BUDGET: std::sync::OnceLock<ConnectionBudget> = std::sync::OnceLock::new();
        BUDGET
            .get_or_init(|| ConnectionBudget::new(connections_for(raise_nofile_limit())))
            .clone()
    }

    /// The connections free now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }

    pub(crate) fn slots(&self) -> std::sync::Arc<tokio::sync::Semaphore> {
        std::sync::Arc::clone(&self.0)
    }
}

/// A descriptor held in reserve: when the proxy is out of descriptors and a client waits in
/// the accept queue, the spare is given up for a moment so that client can be accepted and
/// answered 503 `out_of_descriptors` at once, and taken back as soon as that answer's socket
/// closes (its descriptor number is then the lowest free one, so nothing else takes it first).
#[derive(Debug, Clone, Default)]
pub(crate) struct Spare(std::sync::Arc<std::sync::Mutex<Option<std::fs::File>>>);

impl Spare {
    /// Takes a descriptor, if none is held and one is free.
    pub(crate) fn refill(&self) {
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.is_none() {
            *held = std::fs::File::open("/dev/null").ok();
        }
    }

    /// Gives the descriptor up; true when one was held.
    pub(crate) fn release(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .is_some()
    }
}

/// True when the process cannot open a descriptor right now (EMFILE or ENFILE). The resolver
/// does not keep the cause when its socket cannot be opened (it reports "no connections
/// available"), so a lookup that failed is checked against this, to say what was wrong.
pub(crate) fn descriptors_exhausted() -> bool {
    match std::fs::File::open("/dev/null") {
        Ok(_) => false,
        Err(e) => out_of_descriptors(&e),
    }
}

/// True when a client waits in the listener's accept queue (a poll with no wait).
pub(crate) fn pending(listener: &impl std::os::fd::AsFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        listener,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
}

/// True when an error, or any cause under it, is "too many open files" (EMFILE or ENFILE).
pub(crate) fn out_of_descriptors(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(io.raw_os_error(), Some(23 | 24))
        {
            return true;
        }
        if e.to_string().contains("Too many open files") {
            return true;
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cap_leaves_the_reserve_and_six_descriptors_a_tunnel() {
        assert_eq!(super::connections_for(Some(20_000)), 3320);
        assert_eq!(super::connections_for(Some(10)), 1);
        assert_eq!(super::connections_for(None), 1 << 20);
        let emfile = std::io::Error::from_raw_os_error(24);
        assert!(super::out_of_descriptors(&emfile));
        let refused = std::io::Error::from_raw_os_error(111);
        assert!(!super::out_of_descriptors(&refused));
    }
}

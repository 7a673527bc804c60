//! Capturing a run's output under one byte cap, and the plan for killing it.
//!
//! Stdout and stderr are read separately and share one cap. When the deadline passes or the
//! cap is exceeded, the kill (by container name, in its own task) starts while both pipes keep
//! being drained: the daemon does not finish a kill while the client's output pipe is full.
//! After a kill, output may keep flowing for at most the drain grace; an engine client that
//! still holds its pipes open then is reported as hung, so the executor kills it too and a
//! run never hangs.
//!
//! When the output is copied as it arrives, stderr is held back until the command speaks on
//! stdout, [`HOLD_STDERR`] passes, or [`HOLD_STDERR_BYTES`] are held: an engine that fails to
//! start the container (exit 125) writes its error there first, and agentguard's own message
//! already carries it, so the held copy is dropped instead of said twice
//! ([`Captured::held_stderr`]).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{ChildStderr, ChildStdout};
use tokio::task::JoinHandle;

/// When to stop a run and how long to drain after a kill.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// When the time limit is reached.
    pub(crate) deadline: tokio::time::Instant,
    /// The cap on stdout plus stderr.
    pub(crate) cap: usize,
    /// How long output may keep flowing after a kill.
    pub(crate) drain_grace: Duration,
    /// Copy the kept output to this process's stdout and stderr as it arrives.
    pub(crate) tee: bool,
    /// When copying to a terminal, neutralize what could act on it (`terminal.rs`).
    pub(crate) neutralize: bool,
    /// The entrypoint is the relay: stderr's first line is its isolation receipt, taken
    /// apart from the output ([`Captured::receipt`]), never copied or kept as stderr.
    pub(crate) receipt: bool,
}

/// How long stderr's first bytes are held back before they are copied anyway.
pub(crate) const HOLD_STDERR: Duration = Duration::from_secs(1);
/// How many bytes of stderr are held back at most before they are copied anyway.
pub(crate) const HOLD_STDERR_BYTES: usize = 16 * 1024;

/// Counts the bytes a run has written to stdout and stderr so far (kept or not), for
/// progress reports while it runs. Clones share one count.
#[derive(Debug, Clone, Default)]
pub struct OutputMeter(Arc<AtomicU64>);

impl OutputMeter {
    /// A meter at zero.
    pub fn new() -> OutputMeter {
        OutputMeter::default()
    }

    /// The bytes seen so far.
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Why agentguard stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The deadline passed.
    TimedOut,
    /// The output exceeded the cap.
    OutputLimit,
}

/// What was captured, and how the capture ended.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) truncated: bool,
    /// Set when agentguard killed the run (and waited for the kill to finish).
    pub(crate) stop: Option<Stop>,
    /// The client kept its output open past the drain grace after the kill.
    pub(crate) hung: bool,
    /// The kill agentguard started did not remove the container: what the engine said.
    pub(crate) kill_failed: Option<String>,
    /// The stderr still held back when the pipes closed, not yet copied: the executor drops it
    /// when the engine failed (its own message carries the text), and copies it otherwise.
    pub(crate) held_stderr: Vec<u8>,
    /// The relay's receipt line (after its mark, without the newline), when the plan expects
    /// one and stderr began with it.
    pub(crate) receipt: Option<Vec<u8>>,
}

/// The most bytes read while looking for the receipt line.
pub const MAX_RECEIPT: usize = 16 * 1024;

/// Takes the receipt line out of stderr: the first line that begins with the mark. Lines
/// before it are the engine client's own (a warning printed before the container started)
/// and are passed on as stderr; nothing of the command's can come before it, since the relay
/// writes it before the command exists.
struct Receipt {
    /// Still looking.
    open: bool,
    /// An unfinished line.
    bytes: Vec<u8>,
    /// How many bytes were looked through.
    seen: usize,
}

impl Receipt {
    fn new(open: bool) -> Receipt {
        Receipt {
            open,
            bytes: Vec::new(),
            seen: 0,
        }
    }

    /// Passes on what of `chunk` is not the receipt, keeping the receipt line once whole.
    fn take<'a>(
        &mut self,
        chunk: &'a [u8],
        found: &mut Option<Vec<u8>>,
    ) -> std::borrow::Cow<'a, [u8]> {
        if !self.open {
            return std::borrow::Cow::Borrowed(chunk);
        }
        self.seen += chunk.len();
        self.bytes.extend_from_slice(chunk);
        let mark = RECEIPT_MARK.as_bytes();
        let mut passed = Vec::new();
        while let Some(end) = self.bytes.iter().position(|b| *b == b'\n') {
            let rest = self.bytes.split_off(end + 1);
            let line = std::mem::replace(&mut self.bytes, rest);
            if let Some(receipt) = line.strip_prefix(mark) {
                *found = Some(receipt[..receipt.len() - 1].to_vec());
                self.open = false;
                passed.append(&mut self.bytes);
                return std::borrow::Cow::Owned(passed);
            }
            passed.extend_from_slice(&line);
        }
        if self.seen > MAX_RECEIPT {
            // No receipt within the bound: everything is stderr.
            self.open = false;
            passed.append(&mut self.bytes);
        }
        std::borrow::Cow::Owned(passed)
    }

    /// What was held when stderr ended without a receipt line: stderr after all.
    fn rest(&mut self) -> Vec<u8> {
        self.open = false;
        std::mem::take(&mut self.bytes)
    }
}

/// What begins the relay's receipt line (`agentguard-relay`'s `RECEIPT_MARK`).
pub(crate) const RECEIPT_MARK: &str = "\u{1e}agentguard-receipt ";

/// Stderr held back from the copy (see the module docs).
struct Hold {
    /// Still holding: nothing of stderr was copied yet.
    open: bool,
    bytes: Vec<u8>,
    /// When the held bytes are copied anyway (set by the first held byte).
    until: Option<tokio::time::Instant>,
}

impl Hold {
    fn new(open: bool) -> Hold {
        Hold {
            open,
            bytes: Vec::new(),
            until: None,
        }
    }

    /// Holds `kept` while holding, else copies it to `tee`.
    fn copy(&mut self, kept: &[u8], tee: &mut Option<Box<dyn Write + Send>>) {
        if kept.is_empty() {
            return;
        }
        if self.open {
            self.bytes.extend_from_slice(kept);
            self.until
                .get_or_insert_with(|| tokio::time::Instant::now() + HOLD_STDERR);
            if self.bytes.len() >= HOLD_STDERR_BYTES {
                self.release(tee);
            }
        } else if let Some(out) = tee {
            let _ = out.write_all(kept).and_then(|()| out.flush());
        }
    }

    /// What is still held (nothing once released).
    fn left(self) -> Vec<u8> {
        if self.open { self.bytes } else { Vec::new() }
    }

    /// Copies what is held and stops holding.
    fn release(&mut self, tee: &mut Option<Box<dyn Write + Send>>) {
        if !self.open {
            return;
        }
        self.open = false;
        self.until = None;
        if let Some(out) = tee {
            let _ = out.write_all(&self.bytes).and_then(|()| out.flush());
        }
        self.bytes = Vec::new();
    }
}

/// Reads both pipes until they close, calling `kill` at most once, on the deadline or on
/// overflow; returns after the kill (if any) has finished.
pub(crate) async fn capture<K>(
    mut stdout: Option<ChildStdout>,
    mut stderr: Option<ChildStderr>,
    plan: Plan,
    meter: Option<&OutputMeter>,
    kill: K,
) -> Captured
where
    K: FnOnce() -> JoinHandle<Result<(), String>>,
{
    let mut captured = Captured::default();
    let (mut out_chunk, mut err_chunk) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let mut out_tee = plan
        .tee
        .then(|| crate::terminal::tee(std::io::stdout(), plan.neutralize));
    let mut err_tee = plan
        .tee
        .then(|| crate::terminal::tee(std::io::stderr(), plan.neutralize));
    let mut killer = Killer {
        kill: Some(kill),
        task: None,
        drain_until: None,
        grace: plan.drain_grace,
    };
    let (mut receipt, mut hold) = (Receipt::new(plan.receipt), Hold::new(plan.tee));
    while stdout.is_some() || stderr.is_some() {
        let wait_until = killer.drain_until.unwrap_or(plan.deadline);
        let hold_until = hold.until.unwrap_or(wait_until);
        tokio::select! {
            n = read_some(&mut stdout, &mut out_chunk), if stdout.is_some() => match n {
                Some(n) => {
                    meter.inspect(|m| m.add(n));
                    hold.release(&mut err_tee);
                    let other = captured.stderr.len();
                    captured.truncated |= keep(&mut captured.stdout, other, &out_chunk[..n], plan.cap, out_tee.as_deref_mut().map(|w| w as &mut dyn Write));
                }
                None => stdout = None,
            },
            n = read_some(&mut stderr, &mut err_chunk), if stderr.is_some() => {
                let data = match n {
                    Some(n) => {
                        meter.inspect(|m| m.add(n));
                        receipt.take(&err_chunk[..n], &mut captured.receipt).into_owned()
                    }
                    None => {
                        stderr = None;
                        receipt.rest()
                    }
                };
                let (other, before) = (captured.stdout.len(), captured.stderr.len());
                captured.truncated |= keep(&mut captured.stderr, other, &data, plan.cap, None);
                hold.copy(&captured.stderr[before..], &mut err_tee);
            },
            () = tokio::time::sleep_until(hold_until), if hold.until.is_some() => {
                hold.release(&mut err_tee);
            }
            () = tokio::time::sleep_until(wait_until) => {
                if killer.drain_until.is_some() {
                    // After a kill the output must end soon; never wait on a hung client.
                    captured.hung = true;
                    break;
                }
                killer.start(Stop::TimedOut, &mut captured);
            }
        }
        if captured.truncated {
            killer.start(Stop::OutputLimit, &mut captured);
        }
    }
    captured.held_stderr = hold.left();
    if let Some(task) = killer.task {
        captured.kill_failed = match task.await {
            Ok(Ok(())) => None,
            Ok(Err(message)) => Some(message),
            Err(e) => Some(format!("the kill task failed: {e}")),
        };
    }
    captured
}

/// The kill, started at most once, and the end of the drain after it.
struct Killer<K> {
    kill: Option<K>,
    task: Option<JoinHandle<Result<(), String>>>,
    drain_until: Option<tokio::time::Instant>,
    grace: Duration,
}

impl<K: FnOnce() -> JoinHandle<Result<(), String>>> Killer<K> {
    fn start(&mut self, stop: Stop, captured: &mut Captured) {
        if let Some(kill) = self.kill.take() {
            captured.stop = Some(stop);
            self.task = Some(kill());
            self.drain_until = Some(tokio::time::Instant::now() + self.grace);
        }
    }
}

/// Appends what fits under the cap (shared by stdout and stderr), and copies it to `tee`;
/// true when something was cut.
pub(crate) fn keep(
    buf: &mut Vec<u8>,
    other: usize,
    data: &[u8],
    cap: usize,
    tee: Option<&mut dyn Write>,
) -> bool {
    let room = cap.saturating_sub(buf.len() + other);
    let take = room.min(data.len());
    buf.extend_from_slice(&data[..take]);
    if let Some(out) = tee {
        let _ = out.write_all(&data[..take]).and_then(|()| out.flush());
    }
    take < data.len()
}

async fn read_some<R: AsyncRead + Unpin>(reader: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    let r = reader.as_mut()?;
    match r.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// Copies stderr that [`capture`] held back, once the run is known not to be an engine's
/// failure.
pub(crate) fn copy_held(held: &[u8], plan: Plan) {
    if held.is_empty() || !plan.tee {
        return;
    }
    let mut out = crate::terminal::tee(std::io::stderr(), plan.neutralize);
    let _ = out.write_all(held).and_then(|()| out.flush());
}

#[cfg(test)]
mod tests;

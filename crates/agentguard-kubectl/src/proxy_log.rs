//! The run's egress proxy's decisions, followed from its pod's log: the proxy runs with
//! `--audit-stdout` ([`agentguard_audit::StreamSink`]), and every line that reads as an event
//! of this run ([`agentguard_audit::StreamReader`]) is appended to the run's sink as it
//! arrives, marked with the pod it came from. The proxy's notes (its diagnostics) are shown
//! as warnings here; any other line is counted, never appended.
//!
//! The follower ends when the log does: the proxy writes its end line when it stops, which it
//! does once the run's objects are deleted. A log that ends without that line, or with a gap
//! in the numbers, is a cut (the pod evicted, its log rotated away): the run reports it and
//! the `egress_stream` event that closes the stream records it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentguard_audit::{AuditSink, Read, StreamReader, StreamSummary};
use agentguard_k8s::LABEL_PROXY;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::kubectl::Kubectl;

/// How long the stream may take to end once the run's objects are being deleted: the proxy
/// pod's termination grace (15 s) and a margin.
pub(crate) const DRAIN: Duration = Duration::from_secs(30);
/// The proxy's container in its pod.
const PROXY_CONTAINER: &str = "proxy";
/// The longest line read whole; a longer one is refused (an audit line is at most this long).
const MAX_LINE: usize = agentguard_audit::MAX_LINE_BYTES;

/// How the proxy's stream came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyStream {
    /// The proxy pod the events came from.
    pub pod: String,
    /// Events appended, lines refused, events missing, whether the end line came.
    pub summary: StreamSummary,
}

/// `kubectl logs --follow` of the proxy pod, read on a task of its own.
pub(crate) struct Follower {
    pod: String,
    summary: Arc<Mutex<StreamSummary>>,
    task: JoinHandle<std::result::Result<(), agentguard_audit::Error>>,
}

impl Follower {
    /// Follows the log of the run's proxy pod, appending its events to `sink`.
    pub(crate) async fn start(
        kubectl: &Kubectl,
        run: &str,
        sink: Arc<dyn AuditSink>,
    ) -> Result<Follower> {
        let pods = kubectl.list("pods", &[(LABEL_PROXY, run)]).await?;
        let pod = pods
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str())
            .next()
            .ok_or_else(|| Error::ProxyNotReady {
                name: agentguard_k8s::proxy_name(run),
                seconds: 0,
                what: "its Deployment is available but no pod of it is listed",
            })?
            .to_owned();
        let (child, stdout) = kubectl.follow_logs(&pod, PROXY_CONTAINER, &[])?;
        let run = run.to_owned();
        let marked = pod.clone();
        let summary = Arc::new(Mutex::new(StreamSummary::default()));
        let shared = Arc::clone(&summary);
        let task = tokio::spawn(async move {
            // Killed with the task (kill_on_drop) when the stream is abandoned.
            let _child = child;
            follow(
                BufReader::new(stdout),
                &run,
                &marked,
                sink.as_ref(),
                &shared,
            )
            .await
        });
        Ok(Follower { pod, summary, task })
    }

    /// Waits at most `within` for the stream to end, then records and returns how it came
    /// back. An event that could not be appended is the error.
    pub(crate) async fn finish(
        mut self,
        within: Duration,
        sink: &dyn AuditSink,
    ) -> Result<ProxyStream> {
        match tokio::time::timeout(within, &mut self.task).await {
            Ok(Ok(done)) => done.map_err(Error::Audit)?,
            Ok(Err(join)) => tracing::error!(error = %join, "the proxy log's follower failed"),
            // Still open: the proxy never stopped. What came so far is in the sink and the
            // summary, which says no end line came.
            Err(_) => self.task.abort(),
        }
        let summary = self
            .summary
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        sink.record(summary.event(&self.pod))
            .map_err(Error::Audit)?;
        Ok(ProxyStream {
            pod: self.pod.clone(),
            summary,
        })
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads lines until the end of `log`, appending run `run`'s events from `pod` to `sink` and
/// keeping `summary` up to date after each line.
async fn follow(
    mut log: impl AsyncBufRead + Unpin,
    run: &str,
    pod: &str,
    sink: &dyn AuditSink,
    summary: &Mutex<StreamSummary>,
) -> std::result::Result<(), agentguard_audit::Error> {
    let mut reader = StreamReader::new(run);
    let mut line = Vec::new();
    loop {
        line.clear();
        match read_line(&mut log, &mut line).await {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(error = %e, pod, "reading the proxy pod's log failed");
                return Ok(());
            }
        }
        let text = String::from_utf8_lossy(&line);
        match reader.line(&text) {
            Read::Event(event) => {
                sink.record(event.data("pod", pod))?;
            }
            Read::Note(note) => tracing::warn!(pod, "the run's egress proxy: {note}"),
            Read::Skipped => {}
        }
        *summary.lock().unwrap_or_else(PoisonError::into_inner) = reader.summary().clone();
    }
}

/// One line into `line` (without its newline; cut at [`MAX_LINE`] bytes, the rest skipped):
/// `false` at the end of the log.
async fn read_line(
    log: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let mut read_any = false;
    loop {
        let buf = log.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let (part, found) = match buf.iter().position(|b| *b == b'\n') {
            Some(end) => (&buf[..end], Some(end + 1)),
            None => (buf, None),
        };
        let room = (MAX_LINE + 1).saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        let used = found.unwrap_or(buf.len());
        log.consume(used);
        if found.is_some() {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests;

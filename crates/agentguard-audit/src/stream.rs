//! The audit events of a process whose output another process follows: the egress proxy in a
//! cluster pod writes them on stdout, the cluster executor reads them back through
//! `kubectl logs --follow` and appends each to the run's own chained log.
//!
//! One JSON object per line. An event line is
//! `{"stream":"event","v":1,"run":RUN,"seq":N,"kind":..,"decision":..,"reason":..,"subject":{..},"data":{..}}`
//! with `seq` counting from 0; the last line is `{"stream":"end","v":1,"run":RUN,"events":N}`,
//! written when the process stops. The process's diagnostics for people, which would
//! otherwise share its log unmarked (a kubelet keeps stdout and stderr as one log), are note
//! lines, `{"stream":"note","v":1,"run":RUN,"message":TEXT}`: shown by the follower, never
//! appended, not numbered. The stream has no chain of its own: its lines are
//! re-sealed into the follower's log under the follower's chain and key, so what is verified
//! is that log. What the follower checks instead: every line parses with no unknown field, is
//! of its run, is an egress decision whose keys have their types ([`crate::KEYS`]), and comes
//! in order; a gap in the numbers, or a stream that ends without its end line, is a cut.

use std::io::Write;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::event::{Decision, Event, Kind, capped, mistyped_key};
use crate::sink::{AuditSink, Receipt};

/// The version written in every stream line's `v`.
pub const STREAM_VERSION: u64 = 1;
/// The line a proxy prints before its events (`listening on IP:PORT`); a follower skips it.
pub const LISTENING_PREFIX: &str = "listening on ";
/// The kinds a stream may carry: an egress proxy's decisions.
const STREAM_KINDS: &[Kind] = &[Kind::EgressConnect, Kind::EgressClose, Kind::EgressRoute];

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "stream", rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    Event {
        v: u64,
        run: String,
        seq: u64,
        kind: Kind,
        decision: Decision,
        reason: String,
        subject: Map<String, Value>,
        data: Map<String, Value>,
    },
    End {
        v: u64,
        run: String,
        events: u64,
    },
    Note {
        v: u64,
        run: String,
        message: String,
    },
}

/// The note line (with its newline) that carries `message` for run `run`'s follower.
pub fn note_line(run: &str, message: &str) -> String {
    let line = Line::Note {
        v: STREAM_VERSION,
        run: run.to_owned(),
        message: message.to_owned(),
    };
    // A map of strings and numbers always serializes.
    let mut text = serde_json::to_string(&line).unwrap_or_default();
    text.push('\n');
    text
}

/// What one line of a stream was.
#[derive(Debug, Clone, PartialEq)]
pub enum Read {
    /// An event of the run, to append.
    Event(Event),
    /// A note of the run's process, to show.
    Note(String),
    /// The listening line, the end line, or a refused line (counted in the summary).
    Skipped,
}

impl Read {
    /// The event, if the line was one.
    pub fn event(self) -> Option<Event> {
        match self {
            Read::Event(event) => Some(event),
            _ => None,
        }
    }
}

/// Writes the events of run `run` as stream lines, each flushed at once; [`StreamSink::end`]
/// writes the end line.
pub struct StreamSink<W: Write + Send> {
    run: String,
    state: Mutex<(W, u64)>,
}

impl<W: Write + Send> StreamSink<W> {
    /// A sink writing to `out` for run `run`.
    pub fn new(out: W, run: &str) -> StreamSink<W> {
        StreamSink {
            run: run.to_owned(),
            state: Mutex::new((out, 0)),
        }
    }

    fn write(&self, line: &Line, state: &mut (W, u64)) -> Result<()> {
        let mut text = serde_json::to_string(line).map_err(|e| Error::Stream {
            source: std::io::Error::other(e),
        })?;
        text.push('\n');
        state
            .0
            .write_all(text.as_bytes())
            .and_then(|()| state.0.flush())
            .map_err(|source| Error::Stream { source })
    }

    /// The writer back, once the sink is done with (for a caller that keeps the bytes).
    pub fn into_inner(self) -> W {
        self.state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// Writes a note line: a diagnostic for people, not an event.
    pub fn note(&self, message: &str) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .0
            .write_all(note_line(&self.run, message).as_bytes())
            .and_then(|()| state.0.flush())
            .map_err(|source| Error::Stream { source })
    }

    /// Writes the end line, with how many events came before it.
    pub fn end(&self) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let line = Line::End {
            v: STREAM_VERSION,
            run: self.run.clone(),
            events: state.1,
        };
        self.write(&line, &mut state)
    }
}

impl<W: Write + Send> AuditSink for StreamSink<W> {
    fn record(&self, event: Event) -> Result<Receipt> {
        let event = event.subject("run", self.run.as_str());
        if let Some((key, expected)) = mistyped_key(&event) {
            return Err(Error::Schema {
                key: key.to_owned(),
                expected,
            });
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = state.1;
        let line = Line::Event {
            v: STREAM_VERSION,
            run: self.run.clone(),
            seq,
            kind: event.kind,
            decision: event.decision,
            reason: event.reason,
            subject: event.subject,
            data: event.data,
        };
        self.write(&line, &mut state)?;
        state.1 += 1;
        Ok(Receipt {
            seq,
            hash: String::new(),
        })
    }
}

/// What a follower made of a stream so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamSummary {
    /// Events accepted (each appended by the follower).
    pub events: u64,
    /// Lines refused: not a stream line, of another run, not an egress decision, out of order.
    pub refused: u64,
    /// Events the numbers say were written but never arrived.
    pub missing: u64,
    /// Whether the end line arrived.
    pub ended: bool,
    /// The first refused line (capped) and why.
    pub first_refused: Option<String>,
}

impl StreamSummary {
    /// Whether every event the writer wrote arrived and nothing else did.
    pub fn complete(&self) -> bool {
        self.ended && self.missing == 0 && self.refused == 0
    }

    /// Whether events may be missing: no end line, or a gap in the numbers.
    pub fn cut(&self) -> bool {
        !self.ended || self.missing > 0
    }

    /// The `egress_stream` event that records how the stream of `pod` came back: `complete`
    /// (allow), `stream_cut` (error: events may be missing) or `lines_refused` (deny: lines
    /// that were not this run's events were not appended).
    pub fn event(&self, pod: &str) -> Event {
        let (decision, reason) = if self.cut() {
            (Decision::Error, "stream_cut")
        } else if self.refused > 0 {
            (Decision::Deny, "lines_refused")
        } else {
            (Decision::Allow, "complete")
        };
        let event = Event::new(Kind::EgressStream, decision, reason)
            .data("pod", pod)
            .data("events", self.events)
            .data("refused", self.refused)
            .data("missing", self.missing);
        match &self.first_refused {
            Some(first) => event.data("message", first.as_str()),
            None => event,
        }
    }

    /// What went wrong, for people (`None` when the stream is complete).
    pub fn problem(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.ended {
            parts.push(
                "it ended without its end line (the pod was evicted or its log cut)".to_owned(),
            );
        }
        if self.missing > 0 {
            parts.push(format!(
                "{} events the proxy numbered never arrived",
                self.missing
            ));
        }
        if self.refused > 0 {
            parts.push(format!(
                "{} lines were not this run's events and were not appended",
                self.refused
            ));
        }
        if parts.is_empty() {
            None
        } else {
            Some(parts.join("; "))
        }
    }
}

/// Reads the stream of run `run` line by line.
#[derive(Debug)]
pub struct StreamReader {
    run: String,
    next: u64,
    listened: bool,
    summary: StreamSummary,
}

impl StreamReader {
    /// A reader that accepts only run `run`'s events.
    pub fn new(run: &str) -> StreamReader {
        StreamReader {
            run: run.to_owned(),
            next: 0,
            listened: false,
            summary: StreamSummary::default(),
        }
    }

    /// The summary so far.
    pub fn summary(&self) -> &StreamSummary {
        &self.summary
    }

    /// One line (without or with its newline): an event to append, a note to show, or
    /// nothing (the one listening line, the end line, or a refused line, which is counted).
    pub fn line(&mut self, line: &str) -> Read {
        let line = line.trim_end_matches(['\n', '\r']);
        // The proxy prints it once it listens, which may be just after its first event.
        if !self.listened && !self.summary.ended && line.starts_with(LISTENING_PREFIX) {
            self.listened = true;
            return Read::Skipped;
        }
        match self.check(line) {
            Ok(read) => read,
            Err(why) => {
                self.summary.refused += 1;
                if self.summary.first_refused.is_none() {
                    self.summary.first_refused = Some(format!("{why}: {}", capped(line)));
                }
                Read::Skipped
            }
        }
    }

    fn check(&mut self, line: &str) -> std::result::Result<Read, String> {
        if self.summary.ended {
            return Err("a line after the end line".into());
        }
        let parsed: Line =
            serde_json::from_str(line).map_err(|e| format!("not a stream line ({e})"))?;
        let (v, run) = match &parsed {
            Line::Event { v, run, .. } | Line::End { v, run, .. } | Line::Note { v, run, .. } => {
                (*v, run)
            }
        };
        if v != STREAM_VERSION {
            return Err(format!("stream version {v}, not {STREAM_VERSION}"));
        }
        if *run != self.run {
            return Err(format!(
                "a line of run {:?}, not {:?}",
                capped(run),
                self.run
            ));
        }
        match parsed {
            Line::End { events, .. } => {
                self.summary.ended = true;
                self.summary.missing += events.saturating_sub(self.next);
                Ok(Read::Skipped)
            }
            Line::Note { message, .. } => Ok(Read::Note(message)),
            Line::Event {
                seq,
                kind,
                decision,
                reason,
                subject,
                data,
                ..
            } => {
                if !STREAM_KINDS.contains(&kind) {
                    return Err(format!("a {kind} event, which no egress proxy writes"));
                }
                if subject.get("run").and_then(Value::as_str) != Some(self.run.as_str()) {
                    return Err("its subject names another run".into());
                }
                if seq < self.next {
                    return Err(format!("number {seq} again, after {}", self.next - 1));
                }
                let event = Event {
                    kind,
                    decision,
                    reason,
                    subject,
                    data,
                };
                if let Some((key, want)) = mistyped_key(&event) {
                    return Err(format!("key `{key}` is not of type {want:?}"));
                }
                self.summary.missing += seq - self.next;
                self.next = seq + 1;
                self.summary.events += 1;
                Ok(Read::Event(event))
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! Watching the run's pod: its container's state read every poll, its log followed under the
//! cap from the moment the container starts, and the run ended at the deadline, at the cap, or
//! when the container terminates. The log has stdout and stderr together (the kubelet keeps
//! one stream per container).

use std::time::Duration;

use agentguard_k8s::{CONTAINER, LABEL_RUN};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdout};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::kubectl::Kubectl;

/// How often the pod's state is read.
const POLL: Duration = Duration::from_millis(200);
/// How long the log may take to arrive complete once the container terminated.
const LOG_GRACE: Duration = Duration::from_secs(10);
/// Waiting reasons after which a pod will not start by itself.
const FATAL_WAITING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];
/// The label the Job controller puts on its pods.
const JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// How the run's container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It terminated with this code and reason (`Completed`, `Error`, `OOMKilled`, ...).
    Exited { code: i32, reason: String },
    /// The deadline came first.
    TimedOut,
    /// Its log passed the cap.
    OutputLimit,
}

/// How the run ended, and its log within the cap.
#[derive(Debug)]
pub(crate) struct Watched {
    pub(crate) ended: Ended,
    pub(crate) logs: Vec<u8>,
    pub(crate) truncated: bool,
    /// The run container's `imageID` as the pod's status gave it, once it did.
    pub(crate) image_id: Option<String>,
}

/// Watches the pod of Job `run` until it ends, the `deadline` passes or its log passes `cap`.
pub(crate) async fn watch(
    kubectl: &Kubectl,
    run: &str,
    deadline: std::time::Instant,
    cap: usize,
) -> Result<Watched> {
    let deadline = Instant::from_std(deadline);
    let mut logs: Option<LogStream> = None;
    let mut image_id: Option<String> = None;
    loop {
        if Instant::now() >= deadline {
            return Ok(finish(logs, Ended::TimedOut, cap, image_id));
        }
        let pods = kubectl
            .list("pods", &[(LABEL_RUN, run), (JOB_NAME, run)])
            .await?;
        if let Some(pod) = pods.first() {
            if let Some(id) = container_status(pod)["imageID"]
                .as_str()
                .filter(|id| !id.is_empty())
            {
                image_id = Some(id.to_owned());
            }
            let state = &container_status(pod)["state"];
            if let Some(reason) = state["waiting"]["reason"].as_str()
                && FATAL_WAITING.contains(&reason)
            {
                return Err(Error::NotStarted {
                    reason: reason.to_owned(),
                    message: state["waiting"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                });
            }
            let started = state["running"].is_object() || state["terminated"].is_object();
            if started && logs.is_none() {
                let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                logs = Some(LogStream::start(kubectl, name, cap)?);
            }
            if state["terminated"].is_object() {
                let terminated = &state["terminated"];
                let code = terminated["exitCode"]
                    .as_i64()
                    .and_then(|c| i32::try_from(c).ok())
                    .unwrap_or(-1);
                let reason = terminated["reason"].as_str().unwrap_or_default().to_owned();
                if let Some(stream) = logs.as_mut() {
                    stream
                        .read_until(deadline.min(Instant::now() + LOG_GRACE))
                        .await;
                }
                let over = logs.as_ref().is_some_and(LogStream::over);
                let ended = if over {
                    Ended::OutputLimit
                } else {
                    Ended::Exited { code, reason }
                };
                return Ok(finish(logs, ended, cap, image_id));
            }
        }
        let next = deadline.min(Instant::now() + POLL);
        match logs.as_mut() {
            Some(stream) => {
                stream.read_until(next).await;
                if stream.over() {
                    return Ok(finish(logs, Ended::OutputLimit, cap, image_id));
                }
                if stream.ended {
                    tokio::time::sleep_until(next).await;
                }
            }
            None => tokio::time::sleep_until(next).await,
        }
    }
}

/// The status of the run's container in `pod` (null when there is none yet).
fn container_status(pod: &Value) -> &Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["name"] == CONTAINER))
        .unwrap_or(&Value::Null)
}

fn finish(logs: Option<LogStream>, ended: Ended, cap: usize, image_id: Option<String>) -> Watched {
    let mut bytes = logs.map(|l| l.bytes).unwrap_or_default();
    let head = receipt_len(&bytes);
    let truncated = bytes.len() - head > cap;
    bytes.truncate(head + cap);
    Watched {
        ended,
        logs: bytes,
        truncated,
        image_id,
    }
}

/// The bytes at the log's head that are the relay's isolation receipt line: not the command's
/// output, so not counted against its cap.
fn receipt_len(bytes: &[u8]) -> usize {
    match agentguard_container::Receipt::leading(bytes) {
        (Some(_), rest) => bytes.len() - rest.len(),
        (None, _) => 0,
    }
}

/// `kubectl logs --follow` of the container, asking the server for one byte over the cap
/// (and room for the receipt line before it).
struct LogStream {
    _child: Child,
    stdout: ChildStdout,
    bytes: Vec<u8>,
    ended: bool,
    cap: usize,
}

impl LogStream {
    fn start(kubectl: &Kubectl, pod: &str, cap: usize) -> Result<LogStream> {
        let room = agentguard_container::MAX_RECEIPT;
        let limit = format!(
            "--limit-bytes={}",
            cap.saturating_add(1).saturating_add(room)
        );
        let (child, stdout) = kubectl.follow_logs(pod, CONTAINER, &[&limit])?;
        Ok(LogStream {
            _child: child,
            stdout,
            bytes: Vec::new(),
            ended: false,
            cap,
        })
    }

    fn over(&self) -> bool {
        self.bytes.len() - receipt_len(&self.bytes) > self.cap
    }

    /// Reads what arrives until `until`, the end of the log, or the cap, whichever is first.
    async fn read_until(&mut self, until: Instant) {
        let mut chunk = [0u8; 16 * 1024];
        while !self.ended && !self.over() {
            match tokio::time::timeout_at(until, self.stdout.read(&mut chunk)).await {
                Err(_) => return,
                Ok(Ok(0) | Err(_)) => self.ended = true,
                Ok(Ok(n)) => self.bytes.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

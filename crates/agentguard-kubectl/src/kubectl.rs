//! The one way to call kubectl: `kubectl [--context C] --namespace NS ARGS`, objects as JSON on
//! stdin (never on a command line, never through a shell), stdout as JSON, a time limit on
//! every call, and stderr kept for the error.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use agentguard_k8s::{K8sSettings, LABEL_RUN};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::error::{Error, MIN_MINOR, Result};

/// The most a single kubectl call may take (the API server's answer, not the run).
const CALL_LIMIT: Duration = Duration::from_secs(60);
/// What a run creates, fully qualified so no other API group's resource of the same name is
/// meant.
const RUN_RESOURCES: &str =
    "jobs.batch,networkpolicies.networking.k8s.io,deployments.apps,services";
/// The most of kubectl's stderr an error keeps.
const STDERR_KEPT: usize = 2048;

/// kubectl, pointed at one namespace of one context.
#[derive(Debug, Clone)]
pub struct Kubectl {
    program: PathBuf,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    namespace: String,
}

impl Kubectl {
    /// `kubectl` from PATH, with the settings' context and namespace.
    pub fn new(settings: &K8sSettings) -> Kubectl {
        Kubectl {
            program: PathBuf::from("kubectl"),
            kubeconfig: None,
            context: settings.context.clone(),
            namespace: settings.namespace.clone(),
        }
    }

    /// Another kubectl binary.
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> Kubectl {
        self.program = program.into();
        self
    }

    /// A kubeconfig file instead of `KUBECONFIG` or `~/.kube/config`.
    pub fn with_kubeconfig(mut self, path: impl Into<PathBuf>) -> Kubectl {
        self.kubeconfig = Some(path.into());
        self
    }

    /// The global flags: kubeconfig, context, namespace.
    fn global(&self) -> Vec<std::ffi::OsString> {
        let mut flags = Vec::new();
        if let Some(path) = &self.kubeconfig {
            flags.push("--kubeconfig".into());
            flags.push(path.clone().into_os_string());
        }
        if let Some(context) = &self.context {
            flags.push("--context".into());
            flags.push(context.into());
        }
        flags.push("--namespace".into());
        flags.push((&self.namespace).into());
        flags
    }

    /// The namespace every call is made in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The command for `args`, with the global flags; no stdin, output piped, killed if dropped.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.program);
        command
            .args(self.global())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// `kubectl logs --follow POD -c CONTAINER` and `extra`: the process (killed when
    /// dropped) and its stdout; its stderr is not kept.
    pub(crate) fn follow_logs(
        &self,
        pod: &str,
        container: &str,
        extra: &[&str],
    ) -> Result<(tokio::process::Child, tokio::process::ChildStdout)> {
        let mut args = vec!["logs", "--follow", pod, "-c", container];
        args.extend_from_slice(extra);
        let mut command = self.command(&args);
        command.stderr(Stdio::null());
        let mut child = command.spawn().map_err(|e| self.spawn_error(e))?;
        let stdout = child.stdout.take().ok_or_else(|| Error::Answer {
            args: "logs".into(),
            why: "no stdout".into(),
        })?;
        Ok((child, stdout))
    }

    pub(crate) fn spawn_error(&self, source: std::io::Error) -> Error {
        Error::Spawn {
            program: self.program.display().to_string(),
            source,
        }
    }

    /// Runs `args` (with `input` on stdin) and returns stdout; non-zero is an error.
    pub(crate) async fn call(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>> {
        let mut command = self.command(args);
        if input.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = command.spawn().map_err(|e| self.spawn_error(e))?;
        let shown = args.join(" ");
        let work = async {
            if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
                // A kubectl that exits early closes its stdin: its status says why.
                let _ = stdin.write_all(bytes).await;
            }
            child.wait_with_output().await
        };
        let output = match tokio::time::timeout(CALL_LIMIT, work).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return Err(self.spawn_error(e)),
            Err(_) => {
                return Err(Error::Hung {
                    args: shown,
                    seconds: CALL_LIMIT.as_secs(),
                });
            }
        };
        if output.status.success() {
            return Ok(output.stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stderr = stderr.trim();
        let start = stderr.len().saturating_sub(STDERR_KEPT);
        let start = (start..stderr.len())
            .find(|i| stderr.is_char_boundary(*i))
            .unwrap_or(0);
        Err(Error::Kubectl {
            args: shown,
            status: output.status.to_string(),
            stderr: stderr[start..].to_owned(),
        })
    }

    /// Runs `args` and parses stdout as one JSON value.
    async fn json(&self, args: &[&str]) -> Result<Option<Value>> {
        let out = self.call(args, None).await?;
        if out.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        serde_json::from_slice(&out)
            .map(Some)
            .map_err(|e| Error::Answer {
                args: args.join(" "),
                why: e.to_string(),
            })
    }

    /// Creates `objects`, in order, as one `v1` List on stdin. Field checking happened when
    /// they were compiled (against the API types of the oldest version allowed), so kubectl
    /// does not fetch the server's OpenAPI to check them again.
    pub async fn create(&self, objects: &[Value]) -> Result<()> {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let bytes = serde_json::to_vec(&list).map_err(|e| Error::Answer {
            args: "create".into(),
            why: e.to_string(),
        })?;
        let args = ["create", "--validate=false", "-f", "-", "-o", "name"];
        self.call(&args, Some(&bytes)).await.map(drop)
    }

    /// The object `resource/name`, or `None` when there is none.
    pub async fn get(&self, resource: &str, name: &str) -> Result<Option<Value>> {
        self.json(&["get", resource, name, "--ignore-not-found", "-o", "json"])
            .await
    }

    /// The objects of `resource` whose labels match `selector` (checked again here: a
    /// selector the server ignored must not make another run's object ours).
    pub async fn list(&self, resource: &str, selector: &[(&str, &str)]) -> Result<Vec<Value>> {
        let text: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let joined = text.join(",");
        let list = self
            .json(&["get", resource, "-l", &joined, "-o", "json"])
            .await?
            .unwrap_or_default();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        Ok(items
            .into_iter()
            .filter(|item| {
                selector
                    .iter()
                    .all(|(k, v)| item["metadata"]["labels"][*k].as_str() == Some(*v))
            })
            .collect())
    }

    /// Deletes `resource/name`, if it exists.
    pub async fn delete(&self, resource: &str, name: &str) -> Result<()> {
        let args = [
            "delete",
            resource,
            name,
            "--ignore-not-found",
            "--wait=false",
        ];
        self.call(&args, None).await.map(drop)
    }

    /// Deletes every object of run `run` (in the background: the Job's pods follow it).
    pub async fn delete_run(&self, run: &str) -> Result<()> {
        let selector = run_selector(run);
        self.call(&delete_run_args(&selector), None).await.map(drop)
    }

    /// Starts the deletion of run `run` without waiting for it: for a run whose future is
    /// dropped (cancellation, SIGTERM), so the objects go even when this process ends next.
    pub fn delete_run_detached(&self, run: &str) {
        let selector = run_selector(run);
        let spawned = std::process::Command::new(&self.program)
            .args(self.global())
            .args(delete_run_args(&selector))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            tracing::error!(run, error = %e, "could not start the deletion of the run's Job; `agentguard gc` removes it");
        }
    }

    /// kubectl's own version and the server's, as (major, minor) pairs.
    pub async fn versions(&self) -> Result<((u32, u32), (u32, u32))> {
        let args = ["version", "-o", "json"];
        let version = self.json(&args).await?.unwrap_or_default();
        let pair = |which: &str| -> Result<(u32, u32)> {
            let side = &version[which];
            let number = |key: &str| -> Option<u32> {
                let text = side[key].as_str()?;
                let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            };
            match (number("major"), number("minor")) {
                (Some(major), Some(minor)) => Ok((major, minor)),
                _ => Err(Error::Answer {
                    args: args.join(" "),
                    why: format!("no {which} in {side}"),
                }),
            }
        };
        Ok((pair("clientVersion")?, pair("serverVersion")?))
    }

    /// The server's version, refused when older than the manifests are checked against.
    pub async fn check_server(&self) -> Result<(u32, u32)> {
        let (_, (major, minor)) = self.versions().await?;
        if major != 1 || minor < MIN_MINOR {
            return Err(Error::ServerTooOld { major, minor });
        }
        Ok((major, minor))
    }
}

/// The label selector of every object of run `run`.
fn run_selector(run: &str) -> String {
    format!("{LABEL_RUN}={run}")
}

/// `kubectl delete` of every object `selector` matches, in the background: awaited or detached,
/// the same call.
fn delete_run_args(selector: &str) -> [&str; 6] {
    [
        "delete",
        RUN_RESOURCES,
        "-l",
        selector,
        "--ignore-not-found",
        "--wait=false",
    ]
}

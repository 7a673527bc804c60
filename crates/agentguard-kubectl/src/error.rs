//! Why a run on the cluster did not produce a result.

/// A run on the cluster that could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The manifests could not be made.
    #[error(transparent)]
    Compile(#[from] agentguard_k8s::Error),
    /// kubectl could not be started (not installed, not executable).
    #[error("could not start {program}: {source}; install kubectl or put it on PATH")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// kubectl exited non-zero: the API server refused, or could not be reached.
    #[error("`kubectl {args}` failed ({status}): {stderr}")]
    Kubectl {
        /// What was asked (no object content).
        args: String,
        /// Its exit status.
        status: String,
        /// The end of what it printed on stderr.
        stderr: String,
    },
    /// kubectl did not answer within its time.
    #[error("`kubectl {args}` did not answer within {seconds} s")]
    Hung {
        /// What was asked.
        args: String,
        /// The limit.
        seconds: u64,
    },
    /// kubectl printed something that is not what was asked for.
    #[error("`kubectl {args}` printed no valid answer: {why}")]
    Answer {
        /// What was asked.
        args: String,
        /// What was wrong.
        why: String,
    },
    /// The server is older than the manifests are checked against.
    #[error(
        "the cluster runs Kubernetes {major}.{minor}; agentguard's manifests are checked against 1.{MIN_MINOR} and later, and an older API server drops the fields it does not know, which would weaken the pod silently; upgrade the cluster"
    )]
    ServerTooOld {
        /// The server's major version.
        major: u32,
        /// The server's minor version.
        minor: u32,
    },
    /// The pod could not start (image, config), or never got scheduled in time.
    #[error("the run's pod could not start: {reason}: {message}")]
    NotStarted {
        /// The waiting reason (`ImagePullBackOff`, `CreateContainerConfigError`, ...).
        reason: String,
        /// What the kubelet said.
        message: String,
    },
    /// NetworkPolicy enforcement in the namespace is not proven by a recent canary.
    #[error(
        "NetworkPolicy enforcement in namespace {namespace} is not proven: {why}; run `agentguard doctor` with this config (its canary must be blocked). Nothing was created."
    )]
    Unproven {
        /// The namespace.
        namespace: String,
        /// What the record says.
        why: String,
    },
    /// The canary needs the agentguard image.
    #[error(
        "the NetworkPolicy canary runs `agentguard k8s canary` in [kubernetes] proxy_image, which is not set; set it to an image with agentguard on its PATH"
    )]
    NoCanaryImage,
    /// The canary ended in a way that says nothing about the policy.
    #[error("the NetworkPolicy canary gave no verdict: {0}")]
    Canary(String),
    /// The egress proxy of the run did not become ready.
    #[error("the run's egress proxy {name} was not ready within {seconds} s: {what}")]
    ProxyNotReady {
        /// The proxy's name.
        name: String,
        /// The limit.
        seconds: u64,
        /// What was missing.
        what: &'static str,
    },
    /// The isolation receipt taken inside the run's pod failed, or none came: the command was
    /// never started.
    #[error(
        "the isolation check inside the run's pod failed before the command started ({what}); the command never ran. Check the pod's manifests (`agentguard k8s manifests`) and `agentguard doctor`"
    )]
    IsolationFailed {
        /// Each failed check and what was seen, or why there was no receipt.
        what: String,
        /// The receipt, when one came (recorded whatever it says).
        receipt: Option<Box<agentguard_container::Receipt>>,
    },
    /// An event of the run's egress proxy could not be appended to the audit log.
    #[error("appending the run's egress proxy's decisions to the audit log failed")]
    Audit(#[source] agentguard_audit::Error),
}

/// The oldest Kubernetes minor version the manifests are checked against (k8s-openapi `v1_33`,
/// kubernetes-validate `-k 1.33.0`).
pub const MIN_MINOR: u32 = 33;

impl Error {
    /// A stable snake_case reason code for JSON and the audit log.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Compile(_) => "manifest_invalid",
            Error::Spawn { .. } => "kubectl_missing",
            Error::Kubectl { .. } | Error::Hung { .. } | Error::Answer { .. } => "cluster_error",
            Error::ServerTooOld { .. } => "cluster_too_old",
            Error::NotStarted { .. } => "pod_not_started",
            Error::ProxyNotReady { .. } => "proxy_not_ready",
            Error::Unproven { .. } => "networkpolicy_unproven",
            Error::NoCanaryImage | Error::Canary(_) => "canary_failed",
            Error::IsolationFailed { .. } => "isolation_failed",
            Error::Audit(_) => "audit_failed",
        }
    }

    /// The isolation receipt of a run refused for it, when one came.
    pub fn receipt(&self) -> Option<&agentguard_container::Receipt> {
        match self {
            Error::IsolationFailed { receipt, .. } => receipt.as_deref(),
            _ => None,
        }
    }
}

/// A result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! AgentGuard on Kubernetes, the half that talks to the cluster: runs what
//! [`agentguard_k8s::compile`] made through `kubectl`, as the container crate runs a local
//! engine, with the same [`agentguard_container::RunResult`].
//!
//! [`run`] checks the server's version and the weakened defaults, creates the run's egress
//! proxy and waits for its ClusterIP (for `network = "egress"`), creates the NetworkPolicy then
//! the Job, follows the pod's log under the cap, reads the exit code and reason (`OOMKilled`
//! is [`agentguard_container::RunStatus::Killed`]), and deletes every object of the run,
//! also on timeout and when its future is dropped. [`gc::sweep`] deletes what a killed run left.

#![warn(missing_docs)]

pub mod canary;
pub mod doctor;
mod error;
pub mod gc;
mod kubectl;
mod pod;
mod proof;
mod proxy_log;
mod run;

pub use error::{Error, MIN_MINOR, Result};
pub use kubectl::Kubectl;
pub use proxy_log::ProxyStream;
pub use run::{NotAccepted, Ran, run};

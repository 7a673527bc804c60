//! AgentGuard on Kubernetes (`engine = "kubernetes"`): one Job per allowlisted run.
//!
//! [`compile`] turns a validated [`agentguard_container::ContainerSpec`], a command NAME and
//! the `[kubernetes]` settings into the objects to apply: the Job (every seed default mapped
//! onto the Pod), its NetworkPolicy, and for `network = "egress"` the run's proxy Deployment,
//! Service and NetworkPolicy. It is pure and checked against the API types; the defaults no
//! Pod field can keep are reported ([`Weakened`]) and refused unless the config accepts them
//! by name. [`yaml::documents`] prints them for `agentguard k8s manifests`.

#![warn(missing_docs)]

mod compile;
mod error;
mod model;
mod proxy;
mod receipt;
mod settings;
pub mod yaml;

pub use compile::compile;
pub use error::{Error, Result};
pub use model::{
    CONTAINER, EgressPlan, LABEL_PROXY, LABEL_ROLE, LABEL_RUN, Manifests,
    PROXY_ADDRESS_PLACEHOLDER, RouteGrant, RunNetwork, RunRequest, TTL_AFTER_FINISHED, Weakened,
};
pub use proxy::{SECRETS_DIR, proxy_name};
pub use receipt::RELAY_CONTAINER;
pub use settings::{K8sSettings, dns_label};

#[cfg(test)]
mod tests;

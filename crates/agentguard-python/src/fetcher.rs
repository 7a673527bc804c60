//! `Fetcher`: netpin's DNS-pinned GET, awaited with the thread detached from the interpreter.

use std::path::PathBuf;
use std::sync::Arc;

use agentguard_audit::{AuditSink, Durability};
use agentguard_netpin::{DnsResolver, Fetcher as PinnedFetcher, Resolve};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;

/// The checked network settings both the fetcher and the proxy are built from.
pub(crate) struct NetSettings {
    pub(crate) policy: agentguard_policy::TargetPolicy,
    pub(crate) resolver: Option<Arc<dyn Resolve>>,
}

impl NetSettings {
    /// The policy of `allow`, `allow_ports` and `allow_cidrs`, and a resolver for
    /// `nameservers` (`IP:PORT`), each refused with the keyword's name. `what` names the class.
    pub(crate) fn new(
        py: Python<'_>,
        what: &str,
        allow: &[String],
        allow_ports: &[u16],
        allow_cidrs: &[String],
        nameservers: &[String],
    ) -> PyResult<NetSettings> {
        let invalid = |key: &str, e: &(dyn std::error::Error + 'static)| {
            let message = format!("{what}: {key}{}", errors::chain(e));
            errors::raise(py, "ConfigError", message, "invalid_config")
        };
        let hosts = if allow.is_empty() {
            "allow is empty"
        } else {
            "allow"
        };
        let policy =
            agentguard_config::policy_from(allow, allow_ports, allow_cidrs, ("allow_cidrs", hosts))
                .map_err(|e| invalid("", e.as_ref()))?;
        let resolver = if nameservers.is_empty() {
            None
        } else {
            let servers = nameservers
                .iter()
                .map(|s| DnsResolver::parse_nameserver(s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid("nameservers: ", &e))?;
            let _runtime = crate::runtime(py)?.enter();
            let resolver = DnsResolver::with_nameservers(&servers)
                .map_err(|e| invalid("nameservers: ", &e))?;
            Some(Arc::new(resolver) as Arc<dyn Resolve>)
        };
        Ok(NetSettings { policy, resolver })
    }
}

/// Opens the audit log at `path` (signed with the key in the variable `key_env`) with
/// `durability`, or nothing.
pub(crate) fn audit_log(
    py: Python<'_>,
    path: Option<PathBuf>,
    key_env: Option<&str>,
    durability: Durability,
) -> PyResult<Option<Arc<agentguard_audit::AuditLog>>> {
    let Some(path) = path else { return Ok(None) };
    agentguard_config::open_log(&path, durability, "audit_key_env", key_env)
        .map(|log| Some(Arc::new(log)))
        .map_err(|e| errors::config(py, e.as_ref()))
}

/// A DNS-pinned HTTPS client; threads may share it.
#[pyclass(frozen, module = "agentguard._native")]
pub(crate) struct Fetcher {
    fetcher: crate::Owned<PinnedFetcher>,
}

#[pymethods]
impl Fetcher {
    #[new]
    #[pyo3(signature = (allow, allow_ports, allow_cidrs, nameservers, ca_file, max_bytes, audit, audit_key_env))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        allow: Vec<String>,
        allow_ports: Vec<u16>,
        allow_cidrs: Vec<String>,
        nameservers: Vec<String>,
        ca_file: Option<PathBuf>,
        max_bytes: Option<u64>,
        audit: Option<PathBuf>,
        audit_key_env: Option<String>,
    ) -> PyResult<Self> {
        let net = NetSettings::new(
            py,
            "NetworkExecutor",
            &allow,
            &allow_ports,
            &allow_cidrs,
            &nameservers,
        )?;
        let mut builder = PinnedFetcher::builder().policy(net.policy);
        if let Some(resolver) = net.resolver {
            builder = builder.resolver(resolver);
        }
        if let Some(max) = max_bytes {
            builder = builder.max_bytes(max);
        }
        if let Some(path) = ca_file {
            let pem = std::fs::read(&path).map_err(|e| {
                errors::raise(
                    py,
                    "ConfigError",
                    format!("NetworkExecutor: ca_file {}: {e}", path.display()),
                    "invalid_config",
                )
            })?;
            builder = builder.extra_roots_pem(pem);
        }
        // A fetch is rare and worth a sync, as for the CLI (docs/audit.md).
        if let Some(log) = audit_log(py, audit, audit_key_env.as_deref(), Durability::Fsync)? {
            builder = builder.audit(log as Arc<dyn AuditSink>);
        }
        let _runtime = crate::runtime(py)?.enter();
        let fetcher = builder.build().map_err(|e| {
            errors::raise(
                py,
                "ConfigError",
                format!("NetworkExecutor: {}", errors::chain(&e)),
                "invalid_config",
            )
        })?;
        Ok(Fetcher {
            fetcher: crate::Owned::new(fetcher),
        })
    }

    /// GETs `url`: `(url, status, headers, body, dialed)`, or raises `Refused` or
    /// `NetworkError` with the reason code.
    #[allow(clippy::type_complexity)]
    fn fetch<'py>(
        &self,
        py: Python<'py>,
        url: &str,
    ) -> PyResult<(
        String,
        u16,
        Vec<(String, String)>,
        Bound<'py, PyBytes>,
        String,
    )> {
        let runtime = crate::runtime(py)?;
        let got = py.detach(|| runtime.block_on(self.fetcher.get(url)));
        let response = got.map_err(|e| errors::fetch(py, &e))?;
        Ok((
            response.url,
            response.status,
            response.headers,
            PyBytes::new(py, &response.body),
            response.dialed.to_string(),
        ))
    }
}

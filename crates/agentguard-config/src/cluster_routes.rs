//! Credential routes on a cluster: a route's secret is a Kubernetes Secret
//! (`{ k8s_secret = "NAME/KEY" }`), mounted into the run's proxy pod only. Here: the checks
//! that tie each kind of secret to where runs go, the routes as the manifest compiler takes
//! them ([`agentguard_k8s::RouteGrant`]), and the route the proxy in the pod reads back from
//! its `--route` argument, its secret from the mounted file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use agentguard_egress::Route;
use serde::Deserialize;

use crate::error::KeyError;
use crate::routes::{RouteTable, Routes, SecretSource, split_reference};

impl Routes {
    /// Each secret's kind against where runs go: on a cluster a route's secret must be a
    /// Kubernetes Secret and a route has no `ca_file` (the pod has no file of it); on a local
    /// engine no secret may be one.
    pub(crate) fn check_target(&self, on_cluster: bool) -> Result<(), KeyError> {
        for (name, source) in &self.secrets {
            if !on_cluster && source.k8s_secret.is_some() {
                return Err(KeyError::new(
                    format!("secrets.{name}.k8s_secret"),
                    "a Kubernetes Secret is read only by a cluster run's proxy pod (engine = \"kubernetes\"); on this engine use `env` or `file`",
                ));
            }
        }
        if !on_cluster {
            return Ok(());
        }
        for (name, route) in &self.routes {
            let source = self.secrets.get(&route.secret);
            if source.is_none_or(|s| s.k8s_secret.is_none()) {
                return Err(KeyError::new(
                    format!("routes.{name}.secret"),
                    format!(
                        "on Kubernetes the secret must be a Secret in the namespace, `{} = {{ k8s_secret = \"NAME/KEY\" }}`, which only the run's proxy pod mounts; an `env` or `file` secret would have to be copied into the cluster",
                        route.secret
                    ),
                ));
            }
            if route.ca_file.is_some() {
                return Err(KeyError::new(
                    format!("routes.{name}.ca_file"),
                    "not served on Kubernetes (the proxy pod has no copy of the file); remove it, the upstream then needs a publicly trusted certificate",
                ));
            }
        }
        Ok(())
    }

    /// The routes named in `wanted`, as the manifest compiler takes them.
    pub fn k8s_grants(
        &self,
        wanted: &[String],
    ) -> Result<Vec<agentguard_k8s::RouteGrant>, KeyError> {
        let at = |name: &str, key: &str| {
            let key = format!("routes.{name}{key}");
            move |m: String| KeyError::new(key, m)
        };
        let mut out = Vec::new();
        for name in wanted {
            let table = self
                .routes
                .get(name)
                .ok_or_else(|| at(name, "")(format!("no route named {name:?}")))?;
            let reference = self
                .secrets
                .get(&table.secret)
                .and_then(|s| s.k8s_secret.as_deref())
                .ok_or_else(|| at(name, ".secret")("is not a k8s_secret".to_owned()))?;
            let (secret_name, secret_key) =
                split_reference(reference).map_err(at(name, ".secret"))?;
            let upstream = agentguard_netpin::HttpsUrl::parse(&table.upstream)
                .map_err(|e| at(name, ".upstream")(e.to_string()))?;
            let mut shown = table.clone();
            // The proxy reads its secret from the mounted file; the sandbox's variable is
            // the compiler's to set.
            shown.env = None;
            shown.secret = name.clone();
            out.push(agentguard_k8s::RouteGrant {
                name: name.clone(),
                env: table.env.clone(),
                secret_name: secret_name.to_owned(),
                secret_key: secret_key.to_owned(),
                upstream_port: upstream.port,
                cidrs: table
                    .allow_cidrs
                    .iter()
                    .map(|c| {
                        agentguard_policy::parse_cidr(c)
                            .map_err(|e| at(name, ".allow_cidrs")(e.to_string()))
                    })
                    .collect::<Result<_, _>>()?,
                table: serde_json::to_value(&shown).map_err(|e| at(name, "")(e.to_string()))?,
            });
        }
        Ok(out)
    }
}

/// What `agentguard egress-proxy --route` takes: one route, its secret in a mounted file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProxyRoute {
    name: String,
    secret_file: PathBuf,
    route: RouteTable,
}

/// The route of one `--route` argument (`{"name", "secret_file", "route": TABLE}`), checked
/// as a config's route is and its secret read now from the file.
pub fn proxy_route(text: &str) -> Result<Route, String> {
    let spec: ProxyRoute =
        serde_json::from_str(text).map_err(|e| format!("--route is not a route ({e})"))?;
    let secret = SecretSource {
        file: Some(spec.secret_file),
        mounted: true,
        ..SecretSource::default()
    };
    let mut table = spec.route;
    table.secret = spec.name.clone();
    let routes = Routes::from_file(
        BTreeMap::from([(spec.name.clone(), secret)]),
        BTreeMap::from([(spec.name.clone(), table)]),
        &BTreeMap::new(),
        |path| path.to_owned(),
    )
    .map_err(|e| e.to_string())?;
    let mut built = routes
        .build(&[spec.name].into_iter().collect())
        .map_err(|e| e.to_string())?;
    built
        .pop()
        .map(|(route, _)| route)
        .ok_or_else(|| "--route built no route".to_owned())
}

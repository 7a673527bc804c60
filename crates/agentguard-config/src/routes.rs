//! `[secrets]` and `[routes.NAME]` (DESIGN.md, "Credentials that never enter the sandbox"):
//! the shapes are checked when the file is loaded; the secrets are read only when a sandbox is
//! built for a run or a server, and a missing one refuses it before anything starts, naming
//! the variable or the file, never a value.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agentguard_egress::{Credential, Route, Secret};
use agentguard_policy::parse_cidr;
use serde::{Deserialize, Serialize};

use crate::error::KeyError;
use crate::route_env::check_variable;

/// One `[secrets]` entry: `{ env = "VAR" }`, `{ file = "path" }`, or on a cluster
/// `{ k8s_secret = "NAME/KEY" }`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretSource {
    pub(crate) env: Option<String>,
    pub(crate) file: Option<PathBuf>,
    pub(crate) k8s_secret: Option<String>,
    /// A file the kubelet mounted (group-readable by design): no permission warning.
    #[serde(skip)]
    pub(crate) mounted: bool,
}

/// One `[routes.NAME]` table.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteTable {
    pub(crate) upstream: String,
    pub(crate) secret: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    header: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(default)]
    methods: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) env: Option<String>,
    #[serde(default)]
    pub(crate) allow_cidrs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ca_file: Option<PathBuf>,
}

impl RouteTable {
    /// What the route grants as written: its upstream, its methods (empty: the defaults) and
    /// the ranges it opens for its upstream.
    pub(crate) fn grant(&self) -> (&str, &[String], &[String]) {
        (&self.upstream, &self.methods, &self.allow_cidrs)
    }
}

/// The secrets and routes of a config, shapes checked.
#[derive(Debug, Default, Clone)]
pub struct Routes {
    pub(crate) secrets: BTreeMap<String, SecretSource>,
    pub(crate) routes: BTreeMap<String, RouteTable>,
}

/// How a secret stands, for `agentguard doctor`: (name, where it comes from, the problem).
pub type SecretCheck = (String, String, Option<String>);

impl Routes {
    /// Checks the shapes: each secret has one source, each route names a defined secret and
    /// one way to send it, its `env` is a variable name no other setting uses. File paths
    /// are made relative to the config file (`resolve`).
    pub fn from_file(
        secrets: BTreeMap<String, SecretSource>,
        routes: BTreeMap<String, RouteTable>,
        environment: &BTreeMap<String, String>,
        resolve: impl Fn(&Path) -> PathBuf,
    ) -> Result<Routes, KeyError> {
        let mut out = Routes::default();
        for (name, mut source) in secrets {
            match (&source.env, &source.file, &source.k8s_secret) {
                (Some(var), None, None) if !var.is_empty() => {}
                (None, Some(file), None) => source.file = Some(resolve(file)),
                (None, None, Some(reference)) => {
                    split_reference(reference)
                        .map_err(|why| KeyError::new(format!("secrets.{name}.k8s_secret"), why))?;
                }
                _ => {
                    return Err(KeyError::new(
                        format!("secrets.{name}"),
                        "give exactly one of `env = \"VARIABLE\"`, `file = \"PATH\"` or (on Kubernetes) `k8s_secret = \"NAME/KEY\"`",
                    ));
                }
            }
            out.secrets.insert(name, source);
        }
        let mut variables = BTreeSet::new();
        for (name, mut route) in routes {
            let key = |k: &str| format!("routes.{name}.{k}");
            if !out.secrets.contains_key(&route.secret) {
                return Err(KeyError::new(
                    key("secret"),
                    format!(
                        "no secret named {:?}; add it to [secrets] (for example {} = {{ env = \"TOKEN\" }})",
                        route.secret, route.secret
                    ),
                ));
            }
            credential(&route).map_err(|m| KeyError::new(format!("routes.{name}"), m))?;
            for cidr in &route.allow_cidrs {
                parse_cidr(cidr).map_err(|e| KeyError::new(key("allow_cidrs"), e.to_string()))?;
            }
            if let Some(var) = &route.env {
                check_variable(var, environment).map_err(|m| KeyError::new(key("env"), m))?;
                if !variables.insert(var.clone()) {
                    return Err(KeyError::new(
                        key("env"),
                        format!("{var} is the variable of another route"),
                    ));
                }
            }
            route.ca_file = route.ca_file.as_deref().map(&resolve);
            out.routes.insert(name, route);
        }
        Ok(out)
    }

    /// True when `name` is a defined route.
    pub fn has(&self, name: &str) -> bool {
        self.routes.contains_key(name)
    }

    /// True when there is any route.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Route `name`'s `methods` and `paths` as written (empty: the defaults, `GET`/`HEAD`
    /// and every path).
    pub fn rules(&self, name: &str) -> Option<(&[String], &[String])> {
        self.routes
            .get(name)
            .map(|t| (t.methods.as_slice(), t.paths.as_slice()))
    }

    /// The defined routes' names, for messages.
    pub fn names(&self) -> String {
        self.routes.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// Builds the routes named in `wanted` with their secrets read now: `(route, env)`.
    /// A missing secret or a bad value refuses them all, naming the source, never a value.
    pub fn build(
        &self,
        wanted: &BTreeSet<String>,
    ) -> Result<Vec<(Route, Option<String>)>, KeyError> {
        let mut out = Vec::new();
        for name in wanted {
            let Some(table) = self.routes.get(name) else {
                continue;
            };
            let secret = self.read_secret(&table.secret)?;
            let mut builder = Route::builder(name, &table.upstream, secret).credential(
                credential(table).map_err(|m| KeyError::new(format!("routes.{name}"), m))?,
            );
            for method in &table.methods {
                builder = builder.method(method);
            }
            for path in &table.paths {
                builder = builder.path(path);
            }
            for cidr in &table.allow_cidrs {
                let net = parse_cidr(cidr).map_err(|e| {
                    KeyError::new(format!("routes.{name}.allow_cidrs"), e.to_string())
                })?;
                builder = builder.allow_cidr(net);
            }
            if let Some(file) = &table.ca_file {
                let pem = std::fs::read(file).map_err(|e| {
                    KeyError::new(
                        format!("routes.{name}.ca_file"),
                        format!("cannot read {}: {e}", file.display()),
                    )
                })?;
                builder = builder.ca_pem(pem);
            }
            let route = builder
                .build()
                .map_err(|e| KeyError::new(format!("routes.{name}"), e.to_string()))?;
            out.push((route, table.env.clone()));
        }
        Ok(out)
    }

    /// Every configured secret: where it comes from and whether it can be read (never its
    /// value), for `agentguard doctor`.
    pub fn check_secrets(&self) -> Vec<SecretCheck> {
        self.secrets
            .iter()
            .map(|(name, source)| {
                let problem = self.read_secret_text(name).err();
                (name.clone(), describe(source), problem)
            })
            .collect()
    }

    /// The secret `name`, read from its source now.
    fn read_secret(&self, name: &str) -> Result<Secret, KeyError> {
        self.read_secret_text(name)
            .map_err(|message| KeyError::new(format!("secrets.{name}"), message))
    }

    fn read_secret_text(&self, name: &str) -> Result<Secret, String> {
        let source = self
            .secrets
            .get(name)
            .ok_or_else(|| format!("no secret named {name:?} in [secrets]"))?;
        let text = match (&source.env, &source.file, &source.k8s_secret) {
            (Some(var), _, _) => std::env::var(var).map_err(|_| {
                format!("secret {name:?}: the variable {var} is not set (or not UTF-8) in agentguard's environment; set it, or change [secrets] {name}")
            })?,
            (None, Some(file), _) => read_first_line(name, file, !source.mounted)?,
            // Held by the cluster and read only by the proxy pod: the sandbox built here for
            // a cluster config checks calls and never runs one, so it holds the reference.
            (None, None, Some(reference)) => format!("k8s_secret:{reference}"),
            (None, None, None) => return Err(format!("secret {name:?} has no source")),
        };
        Secret::new(&text).map_err(|why| {
            format!(
                "secret {name:?} from {} is not usable: {why}",
                describe(source)
            )
        })
    }
}

fn describe(source: &SecretSource) -> String {
    match (&source.env, &source.file, &source.k8s_secret) {
        (Some(var), _, _) => format!("the variable {var}"),
        (None, Some(file), _) => format!("the file {}", file.display()),
        (None, None, Some(reference)) => {
            format!("the Kubernetes Secret {reference} (read by the proxy pod, not here)")
        }
        (None, None, None) => "nothing".into(),
    }
}

/// The longest first line a secret file may hold.
pub(crate) const MAX_SECRET_LINE: usize = 8 * 1024;

/// The first line of a secret file: a regular file (checked on the opened descriptor, so a
/// FIFO cannot hang a run nor `/dev/zero` fill its memory), its first line at most
/// [`MAX_SECRET_LINE`] bytes. A file that group or others may read is a warning (when `warn`).
fn read_first_line(name: &str, file: &Path, warn: bool) -> Result<String, String> {
    let cannot = |e: std::io::Error| {
        format!(
            "secret {name:?}: cannot read the file {}: {e}",
            file.display()
        )
    };
    let opened = agentguard_audit::open_regular(file).map_err(cannot)?;
    let meta = opened.metadata().map_err(cannot)?;
    let mut head = Vec::with_capacity(1024);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(&opened, MAX_SECRET_LINE as u64 + 1),
        &mut head,
    )
    .map_err(cannot)?;
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    if line.len() > MAX_SECRET_LINE {
        return Err(format!(
            "secret {name:?}: the first line of {} is longer than {MAX_SECRET_LINE} bytes; a secret file holds the secret on its first line",
            file.display()
        ));
    }
    let text = std::str::from_utf8(line).map_err(|_| {
        format!(
            "secret {name:?}: the first line of {} is not UTF-8",
            file.display()
        )
    })?;
    if warn && meta.permissions().mode() & 0o044 != 0 {
        tracing::warn!(
            file = %file.display(),
            mode = format!("{:o}", meta.permissions().mode() & 0o777),
            "the secret file {name} is readable by group or others; chmod 600 it"
        );
    }
    Ok(text.trim_end_matches('\r').to_owned())
}

/// The credential of a route: `header` + `value`, or `scheme = "basic"` + `user`.
pub(crate) fn credential(route: &RouteTable) -> Result<Credential, String> {
    match (&route.header, &route.value, route.scheme.as_deref(), &route.user) {
        (Some(header), Some(value), None, None) => Ok(Credential::Header {
            name: header.clone(),
            template: value.clone(),
        }),
        (None, None, Some("basic"), Some(user)) => Ok(Credential::Basic { user: user.clone() }),
        (None, None, Some(other), _) if other != "basic" => Err(format!(
            "scheme {other:?} is not known; the only scheme is \"basic\" (with `user`), or give `header` and `value`"
        )),
        _ => Err(
            "give `header` and `value` (value holds {secret}), or `scheme = \"basic\"` and `user`, not both".into(),
        ),
    }
}

/// The longest Secret name Kubernetes accepts (a DNS subdomain) and the longest key.
const MAX_NAME: usize = 253;

/// `NAME/KEY` of a Kubernetes Secret: NAME a DNS subdomain, KEY a Secret key.
pub(crate) fn split_reference(reference: &str) -> Result<(&str, &str), String> {
    let Some((name, key)) = reference.split_once('/') else {
        return Err(format!(
            "{reference:?} is not NAME/KEY (the Secret's name, a slash, the key holding the value)"
        ));
    };
    let subdomain = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !subdomain {
        return Err(format!(
            "{name:?} is not a Secret name (lower-case letters, digits, `-` and `.`, at most 253)"
        ));
    }
    let key_ok = !key.is_empty()
        && key.len() <= MAX_NAME
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !key_ok {
        return Err(format!(
            "{key:?} is not a Secret key (letters, digits, `-`, `_` and `.`)"
        ));
    }
    Ok((name, key))
}

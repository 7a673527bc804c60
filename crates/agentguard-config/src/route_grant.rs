//! What a config's or a policy file's routes grant, for the floor and `policy check`: each
//! upstream as one origin however it is written, the methods allowed there (none written:
//! `GET` and `HEAD`, `agentguard-egress`'s default), and the ranges each route opens.

use std::collections::BTreeSet;

use agentguard_policy::{Grant, parse_cidr};

use crate::error::KeyError;
use crate::routes::Routes;

/// The methods of a route that names none (`agentguard-egress`'s default).
const DEFAULT_METHODS: [&str; 2] = ["GET", "HEAD"];
/// The methods a route may name.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

impl Routes {
    /// What the routes grant (only `routes` and `cidrs` are set); a method that is not one of
    /// the seven, or a range that does not parse, is refused naming its key.
    pub(crate) fn grant(&self) -> Result<Grant, KeyError> {
        let mut grant = Grant::default();
        for (name, route) in &self.routes {
            let (upstream, methods, cidrs) = route.grant();
            let given: Vec<&str> = if methods.is_empty() {
                DEFAULT_METHODS.to_vec()
            } else {
                methods.iter().map(String::as_str).collect()
            };
            let mut allowed = BTreeSet::new();
            for method in given {
                if !METHODS.contains(&method) {
                    return Err(KeyError::new(
                        format!("routes.{name}.methods"),
                        format!(
                            "{method:?} is not one of {} (upper case)",
                            METHODS.join(", ")
                        ),
                    ));
                }
                allowed.insert(method.to_owned());
            }
            for cidr in cidrs {
                grant.cidrs.push(parse_cidr(cidr).map_err(|e| {
                    KeyError::new(format!("routes.{name}.allow_cidrs"), e.to_string())
                })?);
            }
            grant
                .routes
                .entry(origin(upstream))
                .or_default()
                .extend(allowed);
        }
        Ok(grant)
    }
}

/// An upstream as the same origin however it is written: scheme and authority in lower case,
/// no trailing `/`.
pub(crate) fn origin(upstream: &str) -> String {
    let trimmed = upstream.trim_end_matches('/');
    match trimmed.find("://") {
        Some(at) => {
            let rest = &trimmed[at + 3..];
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            format!(
                "{}://{}{path}",
                trimmed[..at].to_ascii_lowercase(),
                authority.to_ascii_lowercase()
            )
        }
        None => trimmed.to_owned(),
    }
}

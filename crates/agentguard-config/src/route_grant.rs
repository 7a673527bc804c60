//! What a config's or a policy file's routes grant, for the floor and `policy check`: each
//! upstream as one origin however it is written, the methods allowed there (none written:
//! `GET` and `HEAD`, `agentguard-egress`'s default and its check), and the ranges each route
//! opens.

use agentguard_netpin::HttpsUrl;
use agentguard_policy::{Grant, parse_cidr};

use crate::error::KeyError;
use crate::routes::Routes;

impl Routes {
    /// What the routes grant (only `routes` and `cidrs` are set); an upstream that is not an
    /// https URL, a method the route builder refuses, or a range that does not parse, is
    /// refused naming its key.
    pub(crate) fn grant(&self) -> Result<Grant, KeyError> {
        let mut grant = Grant::default();
        for (name, route) in &self.routes {
            let (upstream, methods, cidrs) = route.grant();
            let upstream = origin(upstream)
                .map_err(|e| KeyError::new(format!("routes.{name}.upstream"), e))?;
            let allowed = agentguard_egress::route_methods(methods)
                .map_err(|e| KeyError::new(format!("routes.{name}.methods"), e))?;
            for cidr in cidrs {
                grant.cidrs.push(parse_cidr(cidr).map_err(|e| {
                    KeyError::new(format!("routes.{name}.allow_cidrs"), e.to_string())
                })?);
            }
            grant
                .routes
                .entry(upstream)
                .or_default()
                .extend(allowed.iter().map(|m| m.as_str().to_owned()));
        }
        Ok(grant)
    }
}

/// An upstream as one origin however it is written: the canonical URL of the one https parser
/// the routes use (`agentguard_netpin::HttpsUrl`: host canonical, port 443 left out), without a
/// trailing `/`.
fn origin(upstream: &str) -> Result<String, String> {
    let url = HttpsUrl::parse(upstream).map_err(|e| e.to_string())?;
    Ok(url.to_string().trim_end_matches('/').to_owned())
}

//! Name resolution behind a small trait, with hickory-resolver as the real implementation.
//!
//! The trait is the seam that lets the egress proxy and the fetcher share one resolver, and
//! lets unit tests count lookups. The real resolver asks for A and AAAA; with explicit name
//! servers it never consults `/etc/hosts` or search domains, and names are always queried
//! fully qualified.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use agentguard_policy::DomainName;
use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver, TokioResolver};

use crate::error::{Error, LookupError, Result};

/// A boxed future, so the trait stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Resolves a name to all of its addresses (A and AAAA), or says why it could not.
pub trait Resolve: Send + Sync + 'static {
    /// Every address of `name`, in the order the resolver returned them.
    fn lookup<'a>(
        &'a self,
        name: &'a DomainName,
    ) -> BoxFuture<'a, std::result::Result<Vec<IpAddr>, LookupError>>;
}

/// The real resolver (hickory), over UDP and TCP.
pub struct DnsResolver {
    inner: TokioResolver,
}

impl std::fmt::Debug for DnsResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DnsResolver")
    }
}

fn options(explicit: bool) -> ResolverOpts {
    let mut opts = ResolverOpts::default();
    opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    opts.ndots = 0;
    if explicit {
        opts.use_hosts_file = ResolveHosts::Never;
    }
    opts
}

impl DnsResolver {
    /// The system's resolver configuration (`/etc/resolv.conf`).
    pub fn system() -> Result<DnsResolver> {
        let mut builder = Resolver::builder_tokio().map_err(|e| Error::Resolver(Box::new(e)))?;
        *builder.options_mut() = options(false);
        let inner = builder.build().map_err(|e| Error::Resolver(Box::new(e)))?;
        Ok(DnsResolver { inner })
    }

    /// Only these name servers: no hosts file, no search domains.
    pub fn with_nameservers(servers: &[SocketAddr]) -> Result<DnsResolver> {
        if servers.is_empty() {
            return Err(Error::NoNameServers);
        }
        let configs = servers
            .iter()
            .map(|server| {
                let mut config = NameServerConfig::udp_and_tcp(server.ip());
                for connection in &mut config.connections {
                    connection.port = server.port();
                }
                config
            })
            .collect();
        let config = ResolverConfig::from_parts(None, Vec::new(), configs);
        let inner = Resolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(options(true))
            .build()
            .map_err(|e| Error::Resolver(Box::new(e)))?;
        Ok(DnsResolver { inner })
    }

    /// Parses `IP:PORT` name server addresses as written on the command line.
    pub fn parse_nameserver(value: &str) -> Result<SocketAddr> {
        value
            .parse()
            .map_err(|_| Error::NameServer(value.to_owned()))
    }
}

impl Resolve for DnsResolver {
    fn lookup<'a>(
        &'a self,
        name: &'a DomainName,
    ) -> BoxFuture<'a, std::result::Result<Vec<IpAddr>, LookupError>> {
        Box::pin(async move {
            // Fully qualified, so no search domain is ever appended.
            let fqdn = format!("{}.", name.as_str());
            match self.inner.lookup_ip(fqdn.as_str()).await {
                Ok(lookup) => Ok(lookup.iter().collect()),
                Err(e) => Err(Box::new(e) as LookupError),
            }
        })
    }
}

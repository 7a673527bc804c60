//! Integration tests of DNS pinning against real servers on this machine: a fake DNS server
//! on 127.0.0.1 and TLS upstreams with a test CA on 127.0.0.2 and 127.0.0.3. 127.0.0.2/32 is
//! an allow-CIDR standing in for a public address; 127.0.0.3 stands for a private one.

mod dial;
mod fetch;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use agentguard_audit::MemorySink;
use agentguard_netpin::{DnsResolver, Fetcher, FetcherBuilder};
use agentguard_policy::{TargetPolicy, parse_cidr};
use agentguard_test_support::{FakeDns, TestCa, TlsUpstream};

pub(crate) const GOOD: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
pub(crate) const BAD: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));

/// A fake DNS server, a CA, and one upstream on each of 127.0.0.2 and 127.0.0.3, on the same
/// port, each with a certificate for every `*.example.test` name.
pub(crate) struct Net {
    pub(crate) dns: FakeDns,
    pub(crate) ca: TestCa,
    pub(crate) good: TlsUpstream,
    pub(crate) bad: TlsUpstream,
    pub(crate) audit: Arc<MemorySink>,
}

impl Net {
    pub(crate) async fn start() -> Net {
        let dns = FakeDns::start().await;
        let ca = TestCa::new("agentguard test CA");
        let config = ca.server_config(&["*.example.test", "pkgs.example.test"]);
        // Both upstreams share a port, so a rebinding to 127.0.0.3 would find a server there.
        loop {
            let good = TlsUpstream::start(GOOD, 0, Arc::clone(&config)).await;
            let port = good.addr().port();
            if let Ok(Ok(bad)) =
                tokio::spawn(TlsUpstream::try_start(BAD, port, Arc::clone(&config))).await
            {
                return Net {
                    dns,
                    ca,
                    good,
                    bad,
                    audit: Arc::new(MemorySink::default()),
                };
            }
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.good.addr().port()
    }

    pub(crate) fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.port())
    }

    /// A fetcher that allows `hosts`, the upstreams' port, 127.0.0.2/32, trusts only the test CA,
    /// and resolves through the fake DNS server.
    pub(crate) fn fetcher(&self, hosts: &[&str]) -> FetcherBuilder {
        self.fetcher_with(hosts, &[])
    }

    /// [`Net::fetcher`], also allowing `ports`.
    pub(crate) fn fetcher_with(&self, hosts: &[&str], ports: &[u16]) -> FetcherBuilder {
        let mut policy = TargetPolicy::builder()
            .allow_port(self.port())
            .allow_cidr(parse_cidr("127.0.0.2/32").unwrap());
        for host in hosts {
            policy = policy.allow(*host);
        }
        for port in ports {
            policy = policy.allow_port(*port);
        }
        Fetcher::builder()
            .policy(policy.build().unwrap())
            .bundled_roots(false)
            .extra_roots_pem(self.ca.pem())
            .resolver(Arc::new(
                DnsResolver::with_nameservers(&[self.dns.addr()]).unwrap(),
            ))
            .audit(self.audit.clone())
    }

    /// Connections that reached either upstream.
    pub(crate) fn connections(&self) -> (usize, usize) {
        (self.good.seen().len(), self.bad.seen().len())
    }
}

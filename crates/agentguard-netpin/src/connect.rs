//! The pinned TLS connection both HTTPS clients use: the fetcher's GET and the egress
//! proxy's credential routes.
//!
//! In order: the port and the host against the policy (a refused name costs zero DNS
//! queries); resolve once and check every answer; dial only the checked addresses within the
//! connect deadline; TLS with SNI and certificate verification for the name within the TLS
//! deadline, offering only HTTP/1.1. One place, so a route's upstream is checked exactly as
//! `agentguard fetch` checks its URL.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentguard_policy::{Host, TargetPolicy};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::error::{Error, FetchError, Result};
use crate::pin::{dial, pin};
use crate::resolve::Resolve;
use crate::url::UrlError;

/// A TLS client with its roots and deadlines: what [`PinnedTls::connect`] needs besides the
/// policy and the resolver.
#[derive(Clone)]
pub struct PinnedTls {
    tls: TlsConnector,
    /// The most answers considered for one name.
    pub max_answers: usize,
    /// The dial across every checked address together.
    pub connect_timeout: Duration,
    /// The TLS handshake.
    pub tls_timeout: Duration,
}

impl std::fmt::Debug for PinnedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedTls")
            .field("max_answers", &self.max_answers)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls_timeout", &self.tls_timeout)
            .finish_non_exhaustive()
    }
}

/// A verified TLS connection to a checked address.
pub struct Connected {
    /// The stream, TLS verified for the name.
    pub stream: TlsStream<TcpStream>,
    /// The address dialed.
    pub dialed: SocketAddr,
    /// The allowlist pattern that permitted the host.
    pub rule: String,
}

impl PinnedTls {
    /// A client trusting the bundled Mozilla roots (when `bundled`) and the PEM certificates
    /// in `extra_pem`, with 10 s dial and TLS deadlines and the default answer bound.
    pub fn new(bundled: bool, extra_pem: Option<&[u8]>) -> Result<PinnedTls> {
        Ok(PinnedTls {
            tls: TlsConnector::from(Arc::new(client_config(bundled, extra_pem)?)),
            max_answers: crate::pin::DEFAULT_MAX_ANSWERS,
            connect_timeout: Duration::from_secs(10),
            tls_timeout: Duration::from_secs(10),
        })
    }

    /// Checks `host:port` against `policy`, pins it through `resolver`, dials a checked
    /// address and completes a verified TLS handshake for the name.
    pub async fn connect(
        &self,
        policy: &TargetPolicy,
        resolver: &dyn Resolve,
        host: &Host,
        port: u16,
    ) -> std::result::Result<Connected, FetchError> {
        let permit = policy
            .check_target(host, port)
            .map_err(FetchError::Denied)?;
        let pinned = pin(resolver, &policy.addresses, &permit.name, self.max_answers).await?;
        let (stream, dialed) = dial(&pinned, port, self.connect_timeout).await?;
        tracing::debug!(name = %permit.name, %dialed, "dialed a checked address");
        let server_name = ServerName::try_from(permit.name.as_str().to_owned()).map_err(|_| {
            FetchError::InvalidUrl(UrlError::Syntax(format!(
                "{} is not a name TLS accepts",
                permit.name
            )))
        })?;
        match tokio::time::timeout(self.tls_timeout, self.tls.connect(server_name, stream)).await {
            Ok(Ok(stream)) => Ok(Connected {
                stream,
                dialed,
                rule: permit.rule,
            }),
            Ok(Err(source)) => Err(FetchError::Tls {
                addr: dialed,
                source,
            }),
            Err(_) => Err(FetchError::Timeout {
                stage: "tls handshake",
                limit: self.tls_timeout,
            }),
        }
    }
}

/// The TLS client configuration: bundled and extra roots, safe defaults, HTTP/1.1 by ALPN.
fn client_config(bundled: bool, extra_pem: Option<&[u8]>) -> Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    if bundled {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(pem) = extra_pem {
        let mut count = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| Error::Roots(Box::new(e)))?;
            roots.add(cert).map_err(|e| Error::Roots(Box::new(e)))?;
            count += 1;
        }
        if count == 0 {
            return Err(Error::Roots("no CERTIFICATE block found".into()));
        }
    }
    if roots.is_empty() {
        return Err(Error::NoRoots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Roots(Box::new(e)))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

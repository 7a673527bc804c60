//! The TLS name check on a tunnel: after the `200`, the client's first TLS records are read
//! until the ClientHello is whole, and its `server_name` must be the CONNECT host, or the
//! tunnel is closed as `sni_mismatch`, `sni_missing` or `not_tls` before a byte of it is
//! forwarded.

use agentguard_policy::Host;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::shared::{Client, Close, Shared};
use crate::sni::{Hello, MAX_HELLO, server_name};

/// Why the ClientHello check closed a tunnel.
pub(crate) struct HelloRefused {
    reason: &'static str,
    message: String,
    sni: Option<String>,
}

impl HelloRefused {
    fn new(reason: &'static str, message: impl Into<String>) -> HelloRefused {
        HelloRefused {
            reason,
            message: message.into(),
            sni: None,
        }
    }

    pub(crate) fn with(self, close: Close) -> Close {
        Close {
            reason: self.reason,
            message: Some(self.message),
            sni: self.sni,
            ..close
        }
    }
}

/// Reads the client's first TLS records into `sent` until the ClientHello is whole, and
/// requires its `server_name` to be `name`.
pub(crate) async fn check_hello(
    client: &mut impl Client,
    sent: &mut Vec<u8>,
    name: &str,
    shared: &Shared,
    cancel: &CancellationToken,
) -> Result<(), HelloRefused> {
    let limit = shared.limits.head_timeout;
    let deadline = tokio::time::Instant::now() + limit;
    let mut chunk = [0u8; 4096];
    loop {
        match server_name(sent) {
            Hello::Incomplete if sent.len() <= MAX_HELLO => {}
            Hello::Incomplete => {
                return Err(HelloRefused::new("not_tls", "no ClientHello within 64 KiB"));
            }
            Hello::NotTls => {
                return Err(HelloRefused::new(
                    "not_tls",
                    "the first bytes are not a TLS handshake",
                ));
            }
            Hello::Malformed(why) => return Err(HelloRefused::new("not_tls", why)),
            Hello::Complete(None) => {
                return Err(HelloRefused::new(
                    "sni_missing",
                    "the ClientHello names no server",
                ));
            }
            Hello::Complete(Some(sni)) => {
                let same = matches!(Host::parse(&sni), Ok(Host::Domain(d)) if d.as_str() == name);
                if same {
                    return Ok(());
                }
                let shown: String = sni.chars().take(256).collect();
                return Err(HelloRefused {
                    sni: Some(shown.clone()),
                    ..HelloRefused::new(
                        "sni_mismatch",
                        format!("the ClientHello asks for {shown:?}, not for {name}"),
                    )
                });
            }
        }
        let read = tokio::select! {
            () = cancel.cancelled() => return Err(HelloRefused::new("shutdown", "the proxy shut down")),
            read = tokio::time::timeout_at(deadline, client.read(&mut chunk)) => read,
        };
        match read {
            Err(_) => {
                return Err(HelloRefused::new(
                    "not_tls",
                    format!("no ClientHello within {limit:?}"),
                ));
            }
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Err(HelloRefused::new(
                    "client_gone",
                    "the client closed before its ClientHello",
                ));
            }
            Ok(Ok(n)) => sent.extend_from_slice(&chunk[..n]),
        }
    }
}

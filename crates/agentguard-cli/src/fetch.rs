//! `agentguard fetch URL`: one DNS-pinned HTTPS GET from the command line.
//!
//! The body goes to stdout (or one JSON object with `--json`); any refusal prints nothing on
//! stdout, names the reason code on stderr, and exits 123 (denied), 124 (timeout) or 125
//! (the network failed). A status that is not 2xx prints the body and exits 1.

use std::io::Write;
use std::sync::Arc;

use agentguard_audit::{AuditSink, Durability};
use agentguard_netpin::{FetchError, Fetcher};
use anyhow::Context;
use serde_json::json;

use crate::args::FetchArgs;
use crate::exit;

pub(crate) fn run(args: &FetchArgs) -> anyhow::Result<u8> {
    let mut builder = Fetcher::builder().policy(args.net.policy()?);
    if let Some(max) = args.max_bytes {
        builder = builder.max_bytes(max);
    }
    if let Some(path) = &args.ca_file {
        let pem =
            std::fs::read(path).with_context(|| format!("reading --ca-file {}", path.display()))?;
        builder = builder.extra_roots_pem(pem);
    }
    if let Some(path) = &args.audit {
        // A fetch is rare and worth a sync: fsync durability (docs/audit.md).
        let log = crate::config::open_log(
            path,
            Durability::Fsync,
            "--audit-key-env",
            args.audit_key_env.as_deref(),
        )?;
        builder = builder.audit(Arc::new(log) as Arc<dyn AuditSink>);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let response = runtime.block_on(async {
        if let Some(resolver) = args.net.resolver()? {
            builder = builder.resolver(resolver);
        }
        let fetcher = builder.build()?;
        fetcher.get(&args.url).await.map_err(refusal)
    })?;

    let mut stdout = std::io::stdout().lock();
    if args.json {
        let mut value = json!({
            "url": response.url,
            "status": response.status,
            "headers": response.headers,
            "dialed": response.dialed.to_string(),
        });
        match std::str::from_utf8(&response.body) {
            Ok(text) => value["body"] = text.into(),
            Err(_) => value["body_base64"] = base64(&response.body).into(),
        }
        writeln!(stdout, "{value}")?;
    } else {
        stdout.write_all(&response.body)?;
    }
    stdout.flush()?;
    if (200..300).contains(&response.status) {
        Ok(exit::SUCCESS)
    } else {
        crate::output::note(&format!(
            "agentguard: HTTP status {} from {}",
            response.status, response.url
        ));
        Ok(exit::FAILURE)
    }
}

/// Says whether the fetch was refused or failed, and its reason code; the code of the exit
/// comes from the error itself (`exit::code_for`).
fn refusal(err: FetchError) -> anyhow::Error {
    let kind = if err.is_refusal() {
        "refused"
    } else {
        "failed"
    };
    let context = format!("fetch {kind} ({})", err.reason());
    anyhow::Error::new(err).context(context)
}

/// Standard base64 with padding, for bodies that are not UTF-8.
fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64(input.as_bytes()), want);
        }
    }
}

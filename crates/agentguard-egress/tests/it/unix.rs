//! The proxy on a UNIX socket (the per-run proxy of a `network = "egress"` container): the
//! same decisions, limits and audit as on TCP, the socket open to any local user (mode 0666,
//! its folder is what guards it), and gone when the proxy stops.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use agentguard_audit::Kind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::{Env, parse_reply, wait_for};

async fn ask(path: &std::path::Path, raw: &[u8]) -> (UnixStream, Vec<u8>) {
    let mut stream = UnixStream::connect(path).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    (stream, head)
}

#[tokio::test]
async fn a_proxy_on_a_unix_socket_decides_tunnels_and_audits_like_one_on_tcp() {
    let env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.sock");
    let proxy = env
        .proxy(&["pkgs.example.test"])
        .bind_unix(&path, "agentguard-run-1")
        .start()
        .await
        .unwrap();
    assert_eq!(proxy.socket_path(), Some(path.as_path()));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666);
    let p = env.port();
    let (mut stream, head) = ask(
        &path,
        format!("CONNECT pkgs.example.test:{p} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    stream.write_all(b"over the socket").await.unwrap();
    let mut back = [0u8; 15];
    stream.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"over the socket");
    drop(stream);
    let (_, refused) = ask(
        &path,
        format!("CONNECT evil.example.org:{p} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(parse_reply(&refused).status, 403);
    wait_for(&env.audit, Kind::EgressClose, Duration::from_secs(10)).await;
    let records = env.audit.records();
    assert!(
        records
            .iter()
            .all(|r| r.subject["client"] == "agentguard-run-1"),
        "{records:?}"
    );
    proxy.shutdown(Duration::from_secs(1)).await;
    assert!(!path.exists(), "the socket is removed when the proxy stops");
}

#[tokio::test]
async fn an_existing_file_is_never_replaced_by_the_socket() {
    let env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.sock");
    std::fs::write(&path, "not a socket").unwrap();
    let err = env
        .proxy(&["pkgs.example.test"])
        .bind_unix(&path, "run")
        .start()
        .await
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("cannot listen on the UNIX socket"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");
}

//! The proxy with a real file log in flush mode: each decision is written before the dial, at
//! once while the log is free, and through a blocking thread while another process holds the
//! log's lock, so the dial waits for the write and the event loop never does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use agentguard_audit::{AuditLog, LogOptions};

use crate::{Env, echo, tunnel};

/// Lines in the log so far.
fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count()
}

/// Holds the log's lock from a thread of its own (as another writer would) until told to let
/// go, or for at most 10 s; says whether it had to let go by itself.
fn hold_lock(path: &std::path::Path) -> (mpsc::Sender<()>, Arc<AtomicBool>) {
    let file = std::fs::File::open(path).unwrap();
    let (locked_tx, locked_rx) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let by_itself = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&by_itself);
    std::thread::spawn(move || {
        // Waits out the proxy's own lease (at most 10 ms).
        file.lock().unwrap();
        locked_tx.send(()).unwrap();
        if release_rx.recv_timeout(Duration::from_secs(10)).is_err() {
            flag.store(true, Ordering::SeqCst);
        }
        file.unlock().unwrap();
    });
    locked_rx.recv().unwrap();
    (release, by_itself)
}

#[tokio::test]
async fn a_decision_is_written_before_the_dial_whether_the_log_is_free_or_held() {
    let env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("egress.jsonl");
    let log = Arc::new(AuditLog::open(&path, LogOptions::default()).unwrap());
    let proxy = env
        .proxy(&["pkgs.example.test"])
        .audit(log)
        .start()
        .await
        .unwrap();
    let target = format!("pkgs.example.test:{}", env.port());
    // The log is free: the decision is written on the event loop, the tunnel works.
    let mut first = tunnel(proxy.local_addr(), &target).await;
    assert_eq!(echo(&mut first, b"one").await, b"one");
    drop(first);
    for _ in 0..200 {
        if lines(&path) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        lines(&path),
        2,
        "the first tunnel's connect and close events"
    );
    // Another writer holds the log: the next decision waits for it on a blocking thread.
    let (release, by_itself) = hold_lock(&path);
    let addr = proxy.local_addr();
    let second = tokio::spawn(async move { tunnel(addr, &target).await });
    // This test runs on the proxy's own event-loop thread: were the loop blocked on the
    // lock, this sleep would end only when the holder gave up by itself.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "no 200 before the decision is written"
    );
    assert_eq!(lines(&path), 2, "nothing written while the lock is held");
    release.send(()).unwrap();
    let mut second = second.await.unwrap();
    assert_eq!(echo(&mut second, b"two").await, b"two");
    assert!(
        !by_itself.load(Ordering::SeqCst),
        "the event loop was blocked while another writer held the log"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let kinds: Vec<&str> = text
        .lines()
        .map(|l| {
            l.split("\"kind\":\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(kinds, ["egress_connect", "egress_close", "egress_connect"]);
    let summary = agentguard_audit::verify(text.as_bytes(), None).unwrap();
    assert_eq!(summary.events, 3);
}

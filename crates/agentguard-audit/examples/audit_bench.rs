//! Audit append throughput per durability mode, against a baseline run side by side.
//!
//! The baseline is what a simple audit writer does: serialize the event, `write` it, and
//! `fdatasync` it, alone, under a mutex (the reference implementation pays about two fsyncs,
//! 7 ms, per event). Rounds alternate baseline and ours so that drift in the machine's disk
//! affects both; the medians and their ratio are printed as a Markdown table for
//! docs/PERFORMANCE.md. Run it through `cargo xtask bench audit` (release build).
//!
//! Usage: audit_bench DIR [ROUNDS]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agentguard_audit::{AuditLog, AuditSink, Decision, Durability, Event, LogOptions};

fn event(thread: u64, i: u64) -> Event {
    Event::egress_connect(
        Decision::Allow,
        "ok",
        "pkgs.example.com:443",
        "127.0.0.1:40000",
    )
    .data("thread", thread)
    .data("i", i)
    .data("dialed", "127.0.0.2:443")
}

/// Events per second of `threads` threads each calling `append(thread, i)` `per_thread` times.
fn run_threads(threads: u64, per_thread: u64, append: Arc<dyn Fn(u64, u64) + Send + Sync>) -> f64 {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let append = Arc::clone(&append);
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    append(t, i);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("bench thread");
    }
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn baseline(dir: &Path, threads: u64, per_thread: u64) -> f64 {
    let path = fresh(dir, "baseline.jsonl");
    let file = Mutex::new(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open baseline"),
    );
    run_threads(
        threads,
        per_thread,
        Arc::new(move |t, i| {
            let e = event(t, i);
            let line = serde_json::json!({"kind": e.kind.as_str(), "decision": e.decision.as_str(), "reason": e.reason, "subject": e.subject, "data": e.data}).to_string() + "\n";
            let mut f = file.lock().expect("lock");
            f.write_all(line.as_bytes()).expect("write");
            File::sync_data(&f).expect("fsync");
        }),
    )
}

fn ours(dir: &Path, durability: Durability, threads: u64, per_thread: u64) -> f64 {
    let path = fresh(dir, "ours.jsonl");
    let log =
        Arc::new(AuditLog::open(&path, LogOptions::with_durability(durability)).expect("open log"));
    let writer = Arc::clone(&log);
    let rate = run_threads(
        threads,
        per_thread,
        Arc::new(move |t, i| {
            writer.record(event(t, i)).expect("record");
        }),
    );
    // Buffered events must reach the file to count; include that in the measured work.
    let start = Instant::now();
    log.flush().expect("flush");
    let flush = start.elapsed().as_secs_f64();
    let events = (threads * per_thread) as f64;
    events / (events / rate + flush)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// A child process of this benchmark: opens the log at `path` and appends `count` events.
fn child(path: &str, durability: &str, count: u64) {
    let durability = match durability {
        "fsync" => Durability::Fsync,
        _ => Durability::Flush,
    };
    let log = AuditLog::open(path, LogOptions::with_durability(durability)).expect("open log");
    let id = u64::from(std::process::id());
    for i in 0..count {
        log.record(event(id, i)).expect("record");
    }
}

/// Events per second of `processes` processes appending `total` events to one log between
/// them, each with its own handle (and so its own file lock).
fn processes(dir: &Path, durability: &str, processes: u64, total: u64) -> f64 {
    let path = fresh(dir, "shared.jsonl");
    let exe = std::env::current_exe().expect("this benchmark's path");
    let start = Instant::now();
    let children: Vec<_> = (0..processes)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--child", path.to_str().expect("path"), durability])
                .arg((total / processes).to_string())
                .spawn()
                .expect("start a writer process")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("writer").success());
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    let summary = agentguard_audit::verify(
        std::io::BufReader::new(File::open(&path).expect("log")),
        None,
    )
    .expect("the shared log verifies");
    assert_eq!(summary.events, total);
    rate
}

fn main() {
    let mut args = std::env::args().skip(1);
    if std::env::args().nth(1).as_deref() == Some("--child") {
        let path = std::env::args().nth(2).expect("path");
        let durability = std::env::args().nth(3).expect("durability");
        let count = std::env::args()
            .nth(4)
            .and_then(|c| c.parse().ok())
            .expect("count");
        return child(&path, &durability, count);
    }
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "target/bench".into()));
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(5);
    std::fs::create_dir_all(&dir).expect("bench dir");

    println!("| mode | threads | baseline events/s | ours events/s | ratio |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (durability, name) in [
        (Durability::Buffered, "buffered"),
        (Durability::Flush, "flush"),
        (Durability::Fsync, "fsync (group commit)"),
    ] {
        for threads in [1u64, 8] {
            // Fewer events where each one may wait for a disk sync.
            let per_thread = match durability {
                Durability::Fsync => 2_000 / threads,
                _ => 200_000 / threads,
            };
            let base_per_thread = 2_000 / threads;
            let (mut base, mut mine) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                base.push(baseline(&dir, threads, base_per_thread));
                mine.push(ours(&dir, durability, threads, per_thread));
            }
            let (b, m) = (median(base), median(mine));
            println!("| {name} | {threads} | {b:.0} | {m:.0} | {:.1}x |", m / b);
        }
    }

    println!();
    println!("| mode | writer processes | events/s into one log | vs one process |");
    println!("| --- | ---: | ---: | ---: |");
    for (durability, total) in [("flush", 200_000u64), ("fsync", 4_000)] {
        let (mut one, mut eight) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            one.push(processes(&dir, durability, 1, total));
            eight.push(processes(&dir, durability, 8, total));
        }
        let (o, e) = (median(one), median(eight));
        println!("| {durability} | 1 | {o:.0} | 1.00 |");
        println!("| {durability} | 8 | {e:.0} | {:.2} |", e / o);
    }
}

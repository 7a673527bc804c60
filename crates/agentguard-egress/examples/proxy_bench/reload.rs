//! The `reload` mode: sequential CONNECT-to-200 decisions per second through two release
//! `agentguard egress-proxy --policy FILE` processes configured alike, one left alone (the
//! baseline) and one reloaded by SIGHUP every 100 ms while it is measured, its file alternating
//! between two policies that both allow the target (so a reload revokes nothing and every
//! decision is an allow). Rounds alternate which goes first. Both keep an audit log; the
//! reloads taken are counted from the reloaded one's `policy_loaded` events.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use agentguard_test_support::FakeDns;

use crate::peers::{Proxy, median, ready};
use crate::setup::{responder, round_trips};
use crate::{SETUP_CONNECTIONS, SETUP_ROUNDS, SOURCE_IP, connect_via, source_port};

/// The reloads' period.
const PERIOD: Duration = Duration::from_millis(100);

fn start(label: &str, binary: &str, policy: &Path, log: &Path) -> Proxy {
    let child = Command::new(binary)
        .args(["egress-proxy", "--port", "0", "--policy"])
        .arg(policy)
        .arg("--audit")
        .arg(log)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start agentguard egress-proxy --policy");
    ready(label, child)
}

/// While `active`, rewrites `policy` (alternating `texts`) and sends the proxy SIGHUP every
/// [`PERIOD`]; counts the signals sent.
fn reloader(
    pid: u32,
    policy: std::path::PathBuf,
    texts: [String; 2],
    active: Arc<AtomicBool>,
) -> Arc<AtomicU64> {
    let sent = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&sent);
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PERIOD);
        loop {
            tick.tick().await;
            if !active.load(Ordering::SeqCst) {
                continue;
            }
            let n = counted.fetch_add(1, Ordering::SeqCst);
            std::fs::write(&policy, &texts[(n % 2) as usize]).expect("write the policy");
            rustix::process::kill_process(pid, rustix::process::Signal::HUP).expect("SIGHUP");
        }
    });
    sent
}

pub(crate) async fn reload(binary: &str, dir: &Path) {
    let dns = FakeDns::start().await;
    dns.answer_with_ttl("bulk.example.test", &[SOURCE_IP], 300);
    let upstream = responder(source_port()).await;
    let text = |extra: &str| {
        format!(
            "allow = [\"bulk.example.test\"{extra}]\nallow_ports = [{}]\nallow_cidrs = [\"127.0.0.2/32\"]\nnameservers = [\"{}\"]\n",
            upstream.port(),
            dns.addr()
        )
    };
    let paths = |name: &str| {
        (
            dir.join(format!("{name}.toml")),
            dir.join(format!("{name}.jsonl")),
        )
    };
    let (steady_policy, steady_log) = paths("steady");
    let (moving_policy, moving_log) = paths("reloaded");
    std::fs::write(&steady_policy, text("")).expect("policy");
    std::fs::write(&moving_policy, text("")).expect("policy");
    let all = [
        start("no reloads (baseline)", binary, &steady_policy, &steady_log),
        start("a reload every 100 ms", binary, &moving_policy, &moving_log),
    ];
    let active = Arc::new(AtomicBool::new(false));
    let texts = [text(", \"other.example.test\""), text("")];
    let sent = reloader(all[1].child.id(), moving_policy, texts, Arc::clone(&active));
    let target = format!("bulk.example.test:{}", upstream.port());
    for proxy in &all {
        drop(connect_via(proxy.addr, &target).await);
    }
    let mut results: Vec<Vec<(f64, Duration, Duration)>> = vec![Vec::new(); all.len()];
    for round in 0..SETUP_ROUNDS {
        for k in 0..all.len() {
            let i = (round + k) % all.len();
            active.store(i == 1, Ordering::SeqCst);
            let proxy = &all[i];
            results[i].push(
                round_trips(SETUP_CONNECTIONS, async || {
                    drop(connect_via(proxy.addr, &target).await)
                })
                .await,
            );
            active.store(false, Ordering::SeqCst);
        }
    }
    tokio::time::sleep(PERIOD * 2).await;
    let log = std::fs::read_to_string(&moving_log).unwrap_or_default();
    let loaded = log
        .lines()
        .filter(|l| l.contains("\"kind\":\"policy_loaded\""))
        .count();
    let failed = log
        .lines()
        .filter(|l| l.contains("\"kind\":\"policy_loaded\",\"decision\":\"error\""))
        .count();
    println!("| proxy | decisions/s | p50 us | p99 us | rate vs no reloads |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let rates: Vec<f64> = results
        .iter()
        .map(|r| median(r.iter().map(|x| x.0).collect()))
        .collect();
    for (proxy, runs) in all.iter().zip(&results) {
        let rate = median(runs.iter().map(|x| x.0).collect());
        let p50 = median(runs.iter().map(|x| x.1.as_secs_f64() * 1e6).collect());
        let p99 = median(runs.iter().map(|x| x.2.as_secs_f64() * 1e6).collect());
        println!(
            "| {} | {rate:.0} | {p50:.0} | {p99:.0} | {:.2} |",
            proxy.label,
            rate / rates[0]
        );
    }
    println!(
        "\n{SETUP_CONNECTIONS} sequential CONNECT-to-200 decisions per round, {SETUP_ROUNDS} rounds, each starting with the next proxy (medians); both keep an audit log. {} SIGHUPs were sent while the reloaded proxy was measured; its log holds {} `policy_loaded` events ({} of them failures), the start's included.",
        sent.load(Ordering::SeqCst),
        loaded,
        failed
    );
}

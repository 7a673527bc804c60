//! The cost of calling through `agentguard mcp`, with the release binary: run it through
//! `cargo xtask bench mcp`.
//!
//! 1. A tool call of a trivial command (`true` in the busybox probe image, docker) through a
//!    warm server, from a JSON-RPC client in this program, against `agentguard run` of the
//!    same command; rounds alternating, medians of wall time.
//! 2. The server's start to its `tools/list` answer (process start, config load, the
//!    `initialize` handshake, the list), medians.
//! 3. With more configs after ROUNDS (`LABEL=CONFIG`, each with a `noop` command): tool calls
//!    per second through one warm server of each, with 8 calls in flight (a new one sent as
//!    each answer arrives), 64 calls after 8 to warm up.
//!
//! Usage: mcp_bench AGENTGUARD_BINARY CONFIG [ROUNDS [LABEL=CONFIG ...]]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process and its two pipes.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    fn start(binary: &str, config: &str) -> Server {
        Server::start_with(binary, config, &[])
    }

    fn start_with(binary: &str, config: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(binary)
            .args(["mcp", "--config", config])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("agentguard mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Server {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends a request line and reads lines until the response with `id`.
    fn request(&mut self, id: u64, line: &str) -> String {
        writeln!(self.stdin, "{line}").expect("write");
        self.stdin.flush().expect("flush");
        let needle = format!("\"id\":{id},");
        loop {
            let mut got = String::new();
            assert!(
                self.stdout.read_line(&mut got).expect("read") > 0,
                "the server closed"
            );
            if got.contains(&needle) {
                return got;
            }
        }
    }

    fn initialize(&mut self) {
        self.request(1, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#);
        writeln!(
            self.stdin,
            r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
        )
        .expect("write");
    }

    /// Sends `calls` calls of `noop`, `inflight` at a time, and returns the seconds from the
    /// first sent to the last answered.
    fn throughput(&mut self, first_id: u64, calls: u64, inflight: u64) -> f64 {
        let call = |id: u64| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"noop"}}}}"#
            )
        };
        let start = Instant::now();
        let mut sent = 0;
        while sent < inflight.min(calls) {
            writeln!(self.stdin, "{}", call(first_id + sent)).expect("write");
            sent += 1;
        }
        self.stdin.flush().expect("flush");
        let mut answered = 0;
        while answered < calls {
            let mut got = String::new();
            assert!(
                self.stdout.read_line(&mut got).expect("read") > 0,
                "the server closed"
            );
            if !got.contains("\"result\"") && !got.contains("\"error\"") {
                continue;
            }
            assert!(got.contains(r#""isError":false"#), "{got}");
            answered += 1;
            if sent < calls {
                writeln!(self.stdin, "{}", call(first_id + sent)).expect("write");
                self.stdin.flush().expect("flush");
                sent += 1;
            }
        }
        start.elapsed().as_secs_f64()
    }

    fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let binary = args
        .next()
        .expect("usage: mcp_bench AGENTGUARD_BINARY CONFIG [ROUNDS]");
    let config = args.next().expect("CONFIG");
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(15);

    let mut server = Server::start(&binary, &config);
    server.initialize();
    let (mut over_mcp, mut run) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let id = 10 + round as u64;
        let start = Instant::now();
        let answer = server.request(
            id,
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"noop"}}}}"#
            ),
        );
        over_mcp.push(start.elapsed());
        assert!(
            answer.contains(r#"\"status\":\"exited\""#) && answer.contains(r#""isError":false"#),
            "{answer}"
        );
        let start = Instant::now();
        let status = Command::new(&binary)
            .args(["run", "--config", &config, "noop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("agentguard run");
        run.push(start.elapsed());
        assert!(status.success());
    }
    server.stop();

    let mut listed = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        let mut server = Server::start(&binary, &config);
        server.initialize();
        let answer = server.request(2, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
        listed.push(start.elapsed());
        assert!(answer.contains("\"noop\""), "{answer}");
        server.stop();
    }

    let (m, r, l) = (median(over_mcp), median(run), median(listed));
    println!("| measurement | median | ratio |");
    println!("| --- | ---: | ---: |");
    println!(
        "| `agentguard run` of `true` (baseline) | {:.0} ms | 1.00 |",
        r.as_secs_f64() * 1e3
    );
    println!(
        "| the same command as an MCP tool call, server warm | {:.0} ms | {:.3} |",
        m.as_secs_f64() * 1e3,
        m.as_secs_f64() / r.as_secs_f64()
    );
    println!(
        "| `agentguard mcp` start to its `tools/list` answer | {:.1} ms | |",
        l.as_secs_f64() * 1e3
    );
    println!(
        "\n{rounds} alternating rounds of the call; {rounds} server starts; docker with its default runtime, the busybox probe image."
    );
    throughput_rows(&binary, args.collect());
}

/// Tool calls per second through one warm server of each `LABEL=CONFIG`, 8 in flight.
fn throughput_rows(binary: &str, engines: Vec<String>) {
    if engines.is_empty() {
        return;
    }
    println!(
        "\n| engine | MCP tool calls of `true` per second, 8 in flight | ratio to the first |"
    );
    println!("| --- | ---: | ---: |");
    let mut first = None;
    for pair in engines {
        let (label, config) = pair.split_once('=').expect("LABEL=CONFIG");
        // Eight slots, so that eight calls run at once (the default is the core count).
        let mut server = Server::start_with(binary, config, &["--max-concurrent", "8"]);
        server.initialize();
        server.throughput(100, 8, 8);
        let seconds = server.throughput(1000, 64, 8);
        server.stop();
        let rate = 64.0 / seconds;
        let base = *first.get_or_insert(rate);
        println!("| {label} | {rate:.1} | {:.2} |", rate / base);
    }
    println!(
        "\n64 calls after 8 to warm up, through one warm `agentguard mcp --max-concurrent 8` per engine, the next call sent as each answer arrives."
    );
}

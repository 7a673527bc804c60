//! The cost of `network = "egress"`, measured with the release `agentguard` binary on docker
//! (default runtime): run it through `cargo xtask bench egress`.
//!
//! 1. Start cost: `agentguard run` of `true` in the busybox probe image with `network =
//!    "egress"` (a run folder, the relay copy, the in-process proxy on its socket, two more
//!    mounts) against the same command with `network = "none"`, rounds alternating, medians.
//! 2. Throughput: a 256 MiB download from a loopback TCP source on 127.0.0.2 by a Python client
//!    inside the container, through the relay and the run's proxy, against the same client on
//!    the host through `agentguard egress-proxy` directly; each client times its own data
//!    phase (after the 200), so container start is not counted. Rounds alternate; medians.
//!
//! With `AGENTGUARD_BENCH_RELAY_BEFORE=PATH` (a relay built from an earlier commit), the
//! download inside the container also runs with that relay (`AGENTGUARD_RELAY`), in the same
//! rounds: the relay before and after, side by side.
//!
//! Usage: egress_bench AGENTGUARD_BINARY SCRATCH PROBE_IMAGE PYTEST_IMAGE [ROUNDS]

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use agentguard_test_support::FakeDns;

const MIB: u64 = 1 << 20;
const DOWNLOAD: u64 = 256 * MIB;
const SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// The download client: CONNECT, the 200, then bytes until EOF; prints `BYTES SECONDS`.
const CLIENT: &str = r#"import socket, sys, time
host, port, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port))
s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
buf = b""
while b"\r\n\r\n" not in buf:
    chunk = s.recv(4096)
    if not chunk:
        sys.exit(f"no answer: {buf!r}")
    buf += chunk
head, rest = buf.split(b"\r\n\r\n", 1)
if not head.startswith(b"HTTP/1.1 200"):
    sys.exit(f"refused: {head!r}")
n, view, start = len(rest), bytearray(1 << 20), time.monotonic()
while True:
    k = s.recv_into(view)
    if not k:
        break
    n += k
print(n, time.monotonic() - start)
"#;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// A source that sends `DOWNLOAD` bytes to each connection and closes it.
fn start_source() -> u16 {
    let listener = TcpListener::bind((SOURCE, 0)).expect("bind the source on 127.0.0.2");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let block = vec![b'z'; MIB as usize];
                for _ in 0..DOWNLOAD / MIB {
                    if stream.write_all(&block).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// MiB/s from the client's `BYTES SECONDS` line.
fn rate(line: &str) -> f64 {
    let mut words = line.split_whitespace();
    let bytes: f64 = words.next().and_then(|w| w.parse().ok()).expect("bytes");
    let seconds: f64 = words.next().and_then(|w| w.parse().ok()).expect("seconds");
    assert_eq!(bytes as u64, DOWNLOAD, "the whole download arrived");
    bytes / MIB as f64 / seconds
}

/// The benchmark's setting: the binary, the configs, the runs folder, the source's name.
struct Bench {
    binary: String,
    runs: std::path::PathBuf,
    start_config: std::path::PathBuf,
    download_config: std::path::PathBuf,
    /// The same with `cpus` set to the machine's cores: without the default one-CPU quota,
    /// which the client and the relay share inside the container.
    download_all_cpus: std::path::PathBuf,
    target: String,
    dns: std::net::SocketAddr,
    port: u16,
    /// An earlier relay to measure beside this one (`AGENTGUARD_BENCH_RELAY_BEFORE`).
    relay_before: Option<String>,
}

impl Bench {
    fn new(binary: &str, scratch: &str, probe: &str, pytest: &str, dns: &FakeDns) -> Bench {
        let port = start_source();
        let dir = Path::new(scratch).join("egress");
        std::fs::create_dir_all(&dir).expect("scratch");
        std::fs::write(dir.join("client.py"), CLIENT).expect("client");
        let runs = dir.join("runs");
        std::fs::create_dir_all(&runs).expect("runs");
        std::fs::set_permissions(&runs, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("runs mode");
        let egress = format!(
            "[egress]\nallow = [\"source.example.test\"]\nallow_ports = [{port}]\nallow_cidrs = [\"127.0.0.2/32\"]\nnameservers = [\"{}\"]\n",
            dns.addr()
        );
        let start_config = dir.join("start.toml");
        std::fs::write(
            &start_config,
            format!("image = \"{probe}\"\nengine = \"docker\"\n\n[commands.none]\nargv = [\"true\"]\nnetwork = \"none\"\n\n[commands.egress]\nargv = [\"true\"]\nnetwork = \"egress\"\n\n{egress}"),
        )
        .expect("config");
        let target = format!("source.example.test:{port}");
        let download = |name: &str, cpus: &str| {
            let path = dir.join(name);
            std::fs::write(
                &path,
                format!("image = \"{pytest}\"\nengine = \"docker\"\nworkspace = \".\"\nnetwork = \"egress\"\ntimeout = 300\n{cpus}\n[commands]\ndownload = [\"python3\", \"/workspace/client.py\", \"127.0.0.1\", \"3128\", \"{target}\"]\n\n{egress}"),
            )
            .expect("config");
            path
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let download_config = download("download.toml", "");
        let download_all_cpus = download("download-cpus.toml", &format!("cpus = {cores}\n"));
        Bench {
            binary: binary.to_owned(),
            runs,
            start_config,
            download_config,
            download_all_cpus,
            target,
            dns: dns.addr(),
            port,
            relay_before: std::env::var("AGENTGUARD_BENCH_RELAY_BEFORE").ok(),
        }
    }

    /// `agentguard run CONFIG NAME`: its wall time and stdout.
    fn run(&self, config: &Path, name: &str) -> (f64, String) {
        self.run_with(config, name, None)
    }

    /// [`Bench::run`] with the relay at `relay` (`AGENTGUARD_RELAY`), or the built-in one.
    fn run_with(&self, config: &Path, name: &str, relay: Option<&str>) -> (f64, String) {
        let start = Instant::now();
        let mut command = Command::new(&self.binary);
        if let Some(relay) = relay {
            command.env("AGENTGUARD_RELAY", relay);
        }
        let out = command
            .args(["run", "--config"])
            .arg(config)
            .arg(name)
            .env("AGENTGUARD_RUN_DIR", &self.runs)
            .output()
            .expect("agentguard run");
        let elapsed = start.elapsed().as_secs_f64();
        assert!(
            out.status.success(),
            "{name}: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        (elapsed, String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Median wall times of `none` and `egress` runs of `true`, alternating.
    fn start_cost(&self, rounds: usize) -> (f64, f64) {
        let (mut none, mut egress) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            none.push(self.run(&self.start_config, "none").0);
            egress.push(self.run(&self.start_config, "egress").0);
        }
        (median(none), median(egress))
    }

    /// Median MiB/s of the host's client through `agentguard egress-proxy`, and of the client
    /// in the container through the relay, alternating.
    fn throughput(&self, rounds: usize) -> (f64, f64, f64, Option<f64>) {
        let mut proxy = Command::new(&self.binary)
            .args([
                "egress-proxy",
                "--port",
                "0",
                "--allow",
                "source.example.test",
            ])
            .args([
                "--allow-port",
                &self.port.to_string(),
                "--allow-cidr",
                "127.0.0.2/32",
            ])
            .args(["--nameserver", &self.dns.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("egress-proxy");
        let mut line = String::new();
        BufReader::new(proxy.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("readiness line");
        let addr = line.trim().trim_start_matches("listening on ").to_owned();
        let (host, proxy_port) = addr.rsplit_once(':').expect("ip:port");
        let (mut host_rates, mut inside_rates, mut all_cpus) = (Vec::new(), Vec::new(), Vec::new());
        let mut before = Vec::new();
        for _ in 0..rounds {
            let out = Command::new("python3")
                .args(["-c", CLIENT, host, proxy_port, &self.target])
                .output()
                .expect("python3");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            host_rates.push(rate(&String::from_utf8_lossy(&out.stdout)));
            inside_rates.push(rate(&self.run(&self.download_config, "download").1));
            all_cpus.push(rate(&self.run(&self.download_all_cpus, "download").1));
            if let Some(relay) = &self.relay_before {
                let config = &self.download_config;
                before.push(rate(&self.run_with(config, "download", Some(relay)).1));
            }
        }
        let _ = Command::new("kill")
            .args(["-TERM", &proxy.id().to_string()])
            .status();
        let _ = proxy.wait();
        let before = (!before.is_empty()).then(|| median(before));
        (
            median(host_rates),
            median(inside_rates),
            median(all_cpus),
            before,
        )
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [binary, scratch, probe, pytest, rest @ ..] = args.as_slice() else {
        panic!("usage: egress_bench AGENTGUARD_BINARY SCRATCH PROBE_IMAGE PYTEST_IMAGE [ROUNDS]");
    };
    let rounds: usize = rest.first().and_then(|r| r.parse().ok()).unwrap_or(15);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dns = runtime.block_on(FakeDns::start());
    dns.answer("source.example.test", &[SOURCE]);
    let bench = Bench::new(binary, scratch, probe, pytest, &dns);
    let (n, e) = bench.start_cost(rounds);
    let downloads = rounds;
    let (h, i, a, before) = bench.throughput(downloads);
    println!(
        "| measurement | `network = \"none\"` or host (baseline) | `network = \"egress\"` | ratio |"
    );
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| `agentguard run` of `true`, median wall time | {:.0} ms | {:.0} ms | {:.3} |",
        n * 1e3,
        e * 1e3,
        e / n
    );
    println!(
        "| 256 MiB download, median throughput of the data phase | {h:.0} MiB/s (host client through `agentguard egress-proxy`) | {i:.0} MiB/s (client in the container, through the relay and the run's proxy; default `cpus = 1`) | {:.2} |",
        i / h
    );
    println!(
        "| the same, the container with `cpus` = the machine's cores | {h:.0} MiB/s | {a:.0} MiB/s | {:.2} |",
        a / h
    );
    if let Some(b) = before {
        println!(
            "| the same, default `cpus = 1`, with the relay before (`AGENTGUARD_BENCH_RELAY_BEFORE`) | {h:.0} MiB/s | {b:.0} MiB/s | {:.2} |",
            b / h
        );
    }
    println!(
        "\n{rounds} alternating rounds of the start, {downloads} of the download; docker with its default runtime; the same Python client in both places."
    );
}

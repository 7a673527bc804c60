//! Project automation for AgentGuard: `cargo xtask ci | e2e | demo | setup | tidy | bench |
//! wheel | python`.
//!
//! The set-up of container engines lives here once, shared by `demo`, `ci` and `.ci/run`, so
//! the two README commands work on a fresh Debian machine and CI runs exactly what a developer
//! runs. Real engines only: nothing in this crate fakes Docker, Podman or gVisor.

mod bench;
mod ci;
mod cmd;
mod demo;
mod demo_egress;
mod demo_learn;
mod demo_route;
mod e2e;
mod fuzz;
mod image;
mod k8s;
mod netpol;
mod python;
mod release;
mod setup;
mod ship;
mod tidy;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  setup                         install and start what the tests need (Debian, as root)
  e2e [--require LIST]          hardened containers on every engine found; LIST is a comma
                                list of docker,podman,runsc that must not be skipped
  ci                            fmt check, clippy -D warnings, workspace tests, tidy, the
                                k8s goldens, 30 s of each fuzz target, e2e --require
                                docker,podman,runsc, then python (runs setup first)
  demo                          set up, then show the isolation layers working on this machine
  tidy                          repository hygiene checks (also run by `cargo test`)
  fuzz [--seconds N] [TARGET...] build the cargo-fuzz targets (nightly) and run each N s
  k8s-validate                  the Kubernetes goldens through kubernetes-validate and checkov,
                                and the NetworkPolicies' meaning through nca --connectivity
  image proxy                   build localhost/agentguard-proxy:VERSION (a static agentguard,
                                nothing else) into docker and podman, and check it
  dist                          target/dist/agentguard-VERSION-TRIPLE.tar.gz: the static
                                binary, its completions, and a .sha256
  wheel                         build the one abi3 wheel of the Python package into
                                target/wheels/ (maturin)
  python                        that wheel's pytest suite on CPython 3.9 and 3.13 against
                                docker+runsc, then `pip install ./crates/agentguard-python`
  bench [NAME...]               benchmarks against their baselines, written to
                                docs/PERFORMANCE.md (NAME: audit, tunnel,
                                connect, tunnel-tls, connect-tls, idle,
                                container, egress, mcp, fetch);
                                AGENTGUARD_BENCH_BEFORE=BINARY
                                adds an earlier binary to the proxy benchmarks";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup::run().map(|_| ()),
        Some("e2e") => e2e::run(&args[1..]),
        Some("ci") => ci::run(),
        Some("ci-release-builds") => ship::release_builds(),
        Some("demo") => demo::run(),
        Some("tidy") => tidy::run(),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("k8s-validate") => k8s::run(),
        Some("wheel") => python::wheel().map(|_| ()),
        Some("image") if args.get(1).map(String::as_str) == Some("proxy") => release::proxy_image(),
        Some("dist") => release::dist().map(|_| ()),
        Some("python") => python::run(),
        Some("bench") => bench::run(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

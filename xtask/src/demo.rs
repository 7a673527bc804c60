//! `cargo xtask demo`: shows the isolation layers working on this machine, for real.
//!
//! It sets up the engines, classifies a few addresses with the real `agentguard` binary, runs
//! an allowlisted command in a hardened container (and refuses one that is not), fetches over
//! DNS pinning, tunnels curl through the egress proxy, installs a package inside a container
//! whose only way out is its own egress proxy (and is refused an off-list host), and verifies
//! the audit logs. Everything network-related stays on this machine: a test DNS server on
//! 127.0.0.1 and a TLS server with a test CA (and a package index) on 127.0.0.2.

use agentguard_container::{ContainerExecutor, ContainerSpec, Engine, EngineKind};
use anyhow::{Context, Result, bail};

use crate::{cmd, image, setup};

pub(crate) fn run() -> Result<()> {
    let engines = setup::run()?;
    println!("\n== demo 1/7: which addresses count as public (never dials)");
    let agentguard = cmd::debug_binary()?;
    cmd::run(
        agentguard
            .to_str()
            .context("the binary's path is not UTF-8")?,
        &[
            "classify",
            "10.0.0.1",
            "8.8.8.8",
            "::ffff:127.0.0.1",
            "64:ff9b::808:808",
            "0x7f.1",
        ],
    )?;

    let (kind, runtime) = if engines.docker_runsc {
        (EngineKind::Docker, Some("runsc"))
    } else if engines.docker {
        (EngineKind::Docker, None)
    } else if engines.podman {
        (EngineKind::Podman, Some("runc"))
    } else {
        bail!("no container engine is available; run `cargo xtask setup` as root on Debian");
    };
    image::ensure_probe_image(kind.program_name())?;
    let executor = ContainerExecutor::new(demo_spec(kind, runtime)?);
    let identity = executor.identity();
    println!(
        "\n== demo 2/7: the allowlisted command `whoami` in a hardened container ({kind}{})",
        runtime.map(|r| format!(" under {r}")).unwrap_or_default()
    );
    let whoami = executor.invoke("whoami", &[])?;
    println!(
        "$ {}",
        executor.spec().run_command(&whoami, &identity).display()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(executor.run_with(&whoami, &identity))?;
    print!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    if String::from_utf8_lossy(&result.stderr).contains("Read-only file system") {
        println!(
            "(exit status {}: the write to the root file system was refused, as it must be)",
            result
                .exit_code
                .map_or("none".to_owned(), |c| c.to_string())
        );
    } else {
        bail!(
            "the write to the root file system was not refused (exit status {})",
            result
                .exit_code
                .map_or("none".to_owned(), |c| c.to_string())
        );
    }

    refusals(&executor, &rt)?;
    network(&agentguard, kind, runtime)
}

/// The demo's spec: the probe image, `whoami`, and the parameterized `show_note`, whose
/// workspace holds one note.
fn demo_spec(kind: EngineKind, runtime: Option<&str>) -> Result<ContainerSpec> {
    // The workspace of the parameterized command: one note to show.
    let workspace = cmd::root().join("target/xtask/demo-workspace");
    let _ = std::fs::remove_dir_all(&workspace);
    std::fs::create_dir_all(workspace.join("notes"))?;
    std::fs::write(
        workspace.join("notes/hello.txt"),
        "hello from the workspace\n",
    )?;
    let path = agentguard_policy::ParamSpec {
        kind: "path".into(),
        under: Some("notes".into()),
        path_kind: Some("file".into()),
        must_exist: Some(true),
        ..Default::default()
    };
    let mut builder = ContainerSpec::builder(image::PROBE_IMAGE)
        .engine(Engine::of_kind(kind))
        .workspace(workspace.canonicalize()?)
        .command("whoami", ["sh", "-c", "echo \"user $(id -u):$(id -g), kernel $(uname -r), interfaces: $(ls /sys/class/net | tr '\\n' ' ')\"; grep CapEff /proc/self/status; touch /scratch/x"])
        .command_with_params(
            "show_note",
            vec!["cat".into(), "{path}".into()],
            [("path".to_owned(), path)].into(),
        );
    if let Some(runtime) = runtime {
        builder = builder.runtime(runtime);
    }
    Ok(builder.build()?)
}

/// A name off the allowlist and a param value its type refuses never reach the engine; the
/// same command with a good value runs.
fn refusals(executor: &ContainerExecutor, rt: &tokio::runtime::Runtime) -> Result<()> {
    println!(
        "\n== demo 3/7: a name that is not on the allowlist, and a param value its type refuses, never reach the engine"
    );
    match executor.invoke("rm -rf /", &[]) {
        Ok(_) => bail!("an unlisted name produced an argv"),
        Err(denial) => println!("{denial}"),
    }
    let note = |value: &str| {
        let arg = agentguard_policy::Arg::Word(value.to_owned());
        executor.invoke("show_note", &[("path".to_owned(), arg)])
    };
    println!("$ agentguard run show_note path=notes/hello.txt");
    let good = note("notes/hello.txt")?;
    println!("  argv in the container: {:?}", good.argv());
    let shown = rt.block_on(executor.run(&good))?;
    print!("{}", String::from_utf8_lossy(&shown.stdout));
    if shown.stdout != b"hello from the workspace\n" {
        bail!("the parameterized command did not show the note: {shown:?}");
    }
    println!("$ agentguard run show_note path=notes/../../etc/passwd");
    match note("notes/../../etc/passwd") {
        Ok(_) => bail!("a traversal produced an argv"),
        Err(refused) => println!("{refused}"),
    }
    Ok(())
}

fn show(
    program: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<std::process::Output> {
    println!(
        "$ {} {}",
        program.file_name().unwrap_or_default().to_string_lossy(),
        args.join(" ")
    );
    let mut command = std::process::Command::new(program);
    agentguard_test_support::clean_client_env(&mut command);
    command.args(args).envs(env.iter().copied());
    let out = command.output()?;
    print!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

/// The loopback peers of the network demos: a test DNS server, and a TLS server with a test
/// CA on 127.0.0.2 named pkgs.example.test.
struct Peers {
    _runtime: tokio::runtime::Runtime,
    _dns: agentguard_test_support::FakeDns,
    _upstream: agentguard_test_support::TlsUpstream,
    dir: std::path::PathBuf,
    port: String,
    ns: String,
    ca_path: String,
}

impl Peers {
    fn start() -> Result<Peers> {
        use std::net::{IpAddr, Ipv4Addr};

        use agentguard_test_support::{FakeDns, TestCa, TlsUpstream, index};

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let upstream_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let dir = cmd::root().join("target/xtask/demo");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let wheel = dir.join(index::WHEEL_NAME);
        cmd::run(
            "python3",
            &["-c", index::WHEEL_SCRIPT, &wheel.to_string_lossy()],
        )?;
        let files = index::index_files(std::fs::read(&wheel)?);
        let (dns, upstream, ca) = runtime.block_on(async {
            let dns = FakeDns::start().await;
            let ca = TestCa::new("agentguard demo CA");
            let config = ca.server_config(&["pkgs.example.test", "files.example.test"]);
            let upstream = TlsUpstream::start_with_files(upstream_ip, 0, config, files).await?;
            dns.answer("pkgs.example.test", &[upstream_ip]);
            // Off demo 6's allowlist until its learn loop adds it.
            dns.answer("files.example.test", &[upstream_ip]);
            dns.answer(
                "private.example.test",
                &[IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))],
            );
            anyhow::Ok((dns, upstream, ca))
        })?;
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.pem())?;
        Ok(Peers {
            port: upstream.addr().port().to_string(),
            ns: dns.addr().to_string(),
            ca_path: ca_file.to_string_lossy().into_owned(),
            dir,
            _runtime: runtime,
            _dns: dns,
            _upstream: upstream,
        })
    }

    fn log(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    fn context(&self) -> crate::demo_egress::Peers {
        crate::demo_egress::Peers {
            dir: self.dir.clone(),
            port: self.port.clone(),
            ns: self.ns.clone(),
            ca_path: self.ca_path.clone(),
        }
    }
}

/// Demos 4 to 7: DNS pinning, the egress proxy, a container whose only way out is its proxy,
/// and a credential route, against servers on loopback, with audit.
fn network(agentguard: &std::path::Path, kind: EngineKind, runtime: Option<&str>) -> Result<()> {
    let peers = Peers::start()?;
    let fetch_log = fetch_demo(agentguard, &peers)?;
    let egress_log = proxy_demo(agentguard, &peers)?;
    crate::demo_egress::run(agentguard, &peers.context(), kind, runtime)?;
    crate::demo_route::run(agentguard, &peers.context(), kind, runtime)?;
    println!("\n$ agentguard audit show (the egress log, then verify both logs)");
    show(agentguard, &["audit", "show", &egress_log], &[])?;
    let v1 = show(agentguard, &["audit", "verify", &egress_log], &[])?;
    let v2 = show(agentguard, &["audit", "verify", &fetch_log], &[])?;
    if !v1.status.success() || !v2.status.success() {
        bail!("an audit log did not verify");
    }
    Ok(())
}

/// Demo 4: one allowed fetch, one off the allowlist, one resolving to a private address.
fn fetch_demo(agentguard: &std::path::Path, peers: &Peers) -> Result<String> {
    let Peers {
        port, ns, ca_path, ..
    } = peers;
    let fetch_log = peers.log("fetch.jsonl");
    println!(
        "\n== demo 4/7: DNS pinning: fetch resolves once, checks every address, dials exactly those, verifies TLS"
    );
    println!(
        "   (a test DNS server on {ns}; pkgs.example.test is a TLS server with a test CA on 127.0.0.2, allowed by --allow-cidr)"
    );
    let fetch = |host: &str, cidr: &[&str]| -> Result<std::process::Output> {
        let url = format!("https://{host}:{port}/");
        let mut args = vec!["fetch", url.as_str(), "--allow", "*.example.test"];
        args.extend(["--allow-port", port, "--nameserver", ns]);
        args.extend(cidr);
        args.extend(["--ca-file", ca_path, "--audit", &fetch_log]);
        show(agentguard, &args, &[])
    };
    let cidr = ["--allow-cidr", "127.0.0.2/32"];
    let ok = fetch("pkgs.example.test", &cidr)?;
    let off_list = fetch("evil.example.org", &[])?;
    let private = fetch("private.example.test", &cidr)?;
    if !ok.status.success()
        || off_list.status.code() != Some(123)
        || private.status.code() != Some(123)
    {
        bail!("the DNS pinning demo did not behave as documented");
    }
    println!(
        "(allowed and fetched; refused before any DNS query; refused because it resolved to a private address, never dialed)"
    );
    Ok(fetch_log)
}

/// Demo 5: curl through the egress proxy, allowed and refused.
fn proxy_demo(agentguard: &std::path::Path, peers: &Peers) -> Result<String> {
    use std::io::BufRead;

    let Peers {
        port, ns, ca_path, ..
    } = peers;
    println!(
        "\n== demo 5/7: the egress proxy: CONNECT only, allowlisted, pinned, audited; curl through it"
    );
    let egress_log = peers.log("egress.jsonl");
    let mut proxy = std::process::Command::new(agentguard)
        .args([
            "egress-proxy",
            "--allow",
            "pkgs.example.test",
            "--allow-port",
        ])
        .args([port, "--port", "0", "--allow-cidr", "127.0.0.2/32"])
        .args(["--nameserver", ns, "--audit", &egress_log])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufReader::new(proxy.stdout.take().context("proxy stdout")?).read_line(&mut line)?;
    print!("$ agentguard egress-proxy --allow pkgs.example.test ... --port 0\n{line}");
    let proxy_url = format!("http://{}", line.trim().trim_start_matches("listening on "));
    let curl = |host: &str| {
        let url = format!("https://{host}:{port}/");
        let args = ["--silent", "--show-error", "--proxy", &proxy_url];
        let args = [&args[..], &["--cacert", ca_path, &url]].concat();
        show(std::path::Path::new("curl"), &args, &[])
    };
    let through = curl("pkgs.example.test")?;
    let refused = curl("evil.example.test")?;
    cmd::output("kill", &["-TERM", &proxy.id().to_string()])?;
    let stopped = proxy.wait()?;
    if !through.status.success() || refused.status.success() || !stopped.success() {
        bail!("the egress proxy demo did not behave as documented");
    }
    Ok(egress_log)
}

//! The relay: the entrypoint of a `network = "egress"` container, so that the egress proxy is
//! its only way out.
//!
//! The container has no network but `lo`; the proxy listens on a UNIX socket bind-mounted
//! into it. Clients inside need a TCP proxy address (`HTTPS_PROXY=http://127.0.0.1:PORT`),
//! so the relay binds `127.0.0.1:PORT`, starts a copy of itself as the forwarder (which
//! accepts there and copies bytes both ways to the socket, nothing else), and then execs the
//! allowlisted argv in its own place: the command keeps the relay's pid, its stdio, working
//! folder, environment and PATH lookup, and its exit status is the container's. Built as a
//! static binary with nothing but std (no unsafe code), so any image can run it.
//!
//! Usage: `agentguard-relay PORT SOCKET -- ARGV...`. The forwarder is started through a
//! short-lived `agentguard-relay --detach SOCKET`, which starts
//! `agentguard-relay --forward SOCKET` (the listening socket as its stdin) and exits at once:
//! the forwarder is then the child of the container's init, never of the command, so a
//! command that waits for all its children (`wait` in a shell) never waits for it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most connections forwarded at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 512;
/// The copy buffer of each direction: large enough that a bulk download costs few system
/// calls (measured with `cargo xtask bench egress`).
const BUFFER: usize = 256 * 1024;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, socket] if flag == "--forward" => forward(socket),
        [flag, socket] if flag == "--detach" => detach(socket),
        [port, socket, dash, argv @ ..] if dash == "--" && !argv.is_empty() => {
            relay(port, socket, argv)
        }
        _ => {
            let _ = writeln!(
                io::stderr(),
                "agentguard-relay: usage: agentguard-relay PORT SOCKET -- ARGV..."
            );
            ExitCode::from(125)
        }
    }
}

/// Binds the port, starts the forwarder, and execs the command.
fn relay(port: &str, socket: &str, argv: &[String]) -> ExitCode {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        let _ = writeln!(io::stderr(), "agentguard-relay: {what}: {e}");
        ExitCode::from(125)
    };
    let Ok(port) = port.parse::<u16>() else {
        return fail("the port is not a number", &port);
    };
    // Bound before the command starts, so its first connection finds the relay listening.
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => listener,
        Err(e) => return fail(&format!("cannot listen on 127.0.0.1:{port}"), &e),
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return fail("cannot find its own program", &e),
    };
    let listening = OwnedFd::from(listener);
    let detached = Command::new(exe)
        .args(["--detach", socket])
        .stdin(Stdio::from(listening))
        .stdout(Stdio::null())
        .status();
    match detached {
        Ok(status) if status.success() => {}
        Ok(status) => return fail("cannot start the forwarder", &status),
        Err(e) => return fail("cannot start the forwarder", &e),
    }
    // Only returns on failure; PATH is searched as the engine would.
    let error = Command::new(&argv[0]).args(&argv[1..]).exec();
    let code = if error.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    let _ = writeln!(
        io::stderr(),
        "agentguard-relay: cannot run {}: {error}",
        argv[0]
    );
    ExitCode::from(code)
}

/// Starts the forwarder with the same stdin and exits, leaving it to the container's init.
fn detach(socket: &str) -> ExitCode {
    let Ok(exe) = std::env::current_exe() else {
        return ExitCode::from(125);
    };
    match Command::new(exe).args(["--forward", socket]).spawn() {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(
                io::stderr(),
                "agentguard-relay: cannot start the forwarder: {e}"
            );
            ExitCode::from(125)
        }
    }
}

/// Accepts on the listening socket it got as stdin and forwards each connection.
fn forward(socket: &str) -> ExitCode {
    let listener = match io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => TcpListener::from(fd),
        Err(_) => return ExitCode::from(125),
    };
    let active = Arc::new(AtomicUsize::new(0));
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        if active.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            drop(client);
            continue;
        }
        let socket = socket.to_owned();
        let active = Arc::clone(&active);
        active.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let _ = pipe(client, &socket);
                active.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            continue;
        }
    }
    ExitCode::SUCCESS
}

/// Copies bytes both ways between the client and the proxy's socket, passing each side's
/// end of stream on to the other.
fn pipe(client: TcpStream, socket: &str) -> io::Result<()> {
    let proxy = UnixStream::connect(socket)?;
    let (mut client_in, mut proxy_in) = (client.try_clone()?, proxy.try_clone()?);
    let (client_out, proxy_out) = (client, proxy);
    let up = std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(move || {
            let _ = copy(&mut client_in, &proxy_out);
            let _ = proxy_out.shutdown(Shutdown::Write);
        })?;
    let _ = copy(&mut proxy_in, &client_out);
    let _ = client_out.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}

fn copy(from: &mut impl Read, mut to: impl Write) -> io::Result<u64> {
    let mut buf = vec![0u8; BUFFER];
    let mut total = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
}

//! The relay: the entrypoint, and init, of every agentguard container.
//!
//! Before anything else it takes the isolation receipt (`receipt.rs`): what the container
//! looks like from inside, one line on stderr; if any check fails, the command never runs and
//! the relay exits 125. Then it starts the allowlisted argv as its child (PATH searched as the
//! engine would; its stdio, folder and environment the relay's) and waits: as the container's
//! PID 1 it reaps every orphan too (the job `--init` did before it), and it exits with the
//! command's status (128 + the signal that killed it, as an init reports it). It forwards no
//! signal: agentguard stops a run with SIGKILL, which ends the container through its PID 1.
//! Taking the place of the engine's init rather than running behind it costs no exec, so the
//! receipt costs only its checks (measured in `cargo xtask bench container`).
//!
//! For a `network = "egress"` run the container has no network but `lo`; the proxy listens on
//! a UNIX socket bind-mounted into it. Clients inside need a TCP proxy address
//! (`HTTPS_PROXY=http://127.0.0.1:PORT`), so the relay binds `127.0.0.1:PORT` and starts a copy
//! of itself as the forwarder (`agentguard-relay --forward SOCKET`, the listening socket as its
//! stdin), which accepts there and copies bytes both ways to the socket, nothing else; the
//! forwarder is the relay's child, never the command's, so a command that waits for all its
//! children (`wait` in a shell) never waits for it. Built as a static binary with nothing but
//! std and rustix (no unsafe code of its own), so any image can run it.
//!
//! Each direction moves its bytes with `splice(2)` through a pipe of its own (socket to
//! pipe to socket, never through user space), one thread per direction, so a blocking splice
//! waits only on its own pipe. Where the kernel cannot splice these sockets (the first splice
//! fails with EINVAL, ENOSYS or EOPNOTSUPP), or no pipe can be made, that direction falls back
//! to a copy through a 256 KiB buffer; `AGENTGUARD_RELAY_COPY=1` forces the copy (for tests).
//!
//! Usage: `agentguard-relay --receipt UID:GID [--seccomp] [PORT SOCKET | --cluster] -- ARGV...`
//! (`--cluster`: in a cluster's pod, whose NetworkPolicy confines its network; the pod's
//! PID 1 is its pause container, and the relay reaps its own children only).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

mod receipt;

use rustix::io::Errno;
use rustix::pipe::{PipeFlags, SpliceFlags, splice};
use rustix::process::{Pid, WaitOptions, wait};

/// The most connections forwarded at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 512;
/// The copy buffer of each direction: large enough that a bulk download costs few system
/// calls (measured with `cargo xtask bench egress`).
const BUFFER: usize = 256 * 1024;
/// The pipe size each direction asks for (the default is 64 KiB; the most without privilege
/// is `/proc/sys/fs/pipe-max-size`, 1 MiB by default).
const PIPE: usize = 1024 * 1024;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, socket] if flag == "--forward" => forward(socket),
        [flag, ids, rest @ ..] if flag == "--receipt" => with_receipt(ids, rest),
        // The relay alone, without a receipt (a test's fake engine runs it on the host, where
        // the checks cannot hold); agentguard's runs never ask for it, and the executor refuses
        // a run whose stderr does not begin with a receipt.
        [port, socket, dash, argv @ ..] if dash == "--" && !argv.is_empty() => {
            relay(port, socket, argv, None)
        }
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    let _ = writeln!(
        io::stderr(),
        "agentguard-relay: usage: agentguard-relay --receipt UID:GID [--seccomp] [PORT SOCKET | --cluster] -- ARGV..."
    );
    ExitCode::from(125)
}

/// `--receipt UID:GID`, `--seccomp` if the run's seccomp filter must show, and then `-- ARGV`
/// (a `network = "none"` run), `--cluster -- ARGV` (a cluster's pod) or `PORT SOCKET -- ARGV`
/// (an egress run, its proxy's socket checked too): the receipt, and only when it holds, the
/// command (behind the relay for egress).
fn with_receipt(ids: &str, rest: &[String]) -> ExitCode {
    let (seccomp, rest) = match rest {
        [flag, rest @ ..] if flag == "--seccomp" => (true, rest),
        rest => (false, rest),
    };
    let (socket, cluster, argv) = match rest {
        [dash, argv @ ..] if dash == "--" => (None, false, argv),
        [cluster, dash, argv @ ..] if cluster == "--cluster" && dash == "--" => (None, true, argv),
        [port, socket, dash, argv @ ..] if dash == "--" => (Some((port, socket)), false, argv),
        _ => return usage(),
    };
    if argv.is_empty() {
        return usage();
    }
    match expect(ids, socket.map(|(_, s)| s.as_str()), cluster, seccomp) {
        Some(expect) if receipt::give(&expect) => match socket {
            Some((port, socket)) => relay(port, socket, argv, Some(expect.ids())),
            None => supervise(argv, Some(expect.ids()), None),
        },
        _ => ExitCode::from(ISOLATION_FAILED),
    }
}

/// The status of a run whose isolation receipt failed: the command never ran.
const ISOLATION_FAILED: u8 = 125;

/// What the receipt expects, from `UID:GID`.
fn expect<'a>(
    ids: &str,
    socket: Option<&'a str>,
    cluster: bool,
    seccomp: bool,
) -> Option<receipt::Expect<'a>> {
    let (uid, gid) = ids.split_once(':')?;
    Some(receipt::Expect {
        uid: uid.parse().ok()?,
        gid: gid.parse().ok()?,
        socket,
        cluster,
        seccomp,
    })
}

/// Binds the port, starts the forwarder, and runs the command.
fn relay(port: &str, socket: &str, argv: &[String], ids: Option<(u32, u32)>) -> ExitCode {
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
    let forwarder = Command::new(exe)
        .args(["--forward", socket])
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .stdout(Stdio::null())
        .spawn();
    match forwarder {
        Ok(forwarder) => supervise(argv, ids, Some(forwarder)),
        Err(e) => fail("cannot start the forwarder", &e),
    }
}

/// Starts `argv` as the relay's child and waits for it, reaping every other child that ends
/// meanwhile (as PID 1, the container's orphans); returns its status: its exit code, or 128 +
/// the signal that killed it, or the status a shell gives a command it cannot start. The
/// forwarder, if any, is killed once the command ends.
///
/// With the run's `ids` (the ones the receipt found) the child sets them itself before it
/// execs (a no-op that states them), which also makes std start it with `fork` rather than
/// `posix_spawn`: glibc's `posix_spawn` resets every signal's disposition in the child, one
/// system call each, which under gVisor cost more than the rest of the start.
fn supervise(argv: &[String], ids: Option<(u32, u32)>, mut forwarder: Option<Child>) -> ExitCode {
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    if let Some((uid, gid)) = ids {
        command.uid(uid).gid(gid);
    }
    let command = match command.spawn() {
        Ok(command) => command,
        Err(error) => {
            stop(forwarder);
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
            return ExitCode::from(code);
        }
    };
    let main = Pid::from_child(&command);
    let helper = forwarder.as_ref().map(Pid::from_child);
    loop {
        match wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) if pid == main => {
                stop(forwarder);
                let code = status
                    .exit_status()
                    .or_else(|| status.terminating_signal().map(|signal| 128 + signal))
                    .unwrap_or(125);
                return ExitCode::from(u8::try_from(code).unwrap_or(125));
            }
            // The forwarder ended by itself: it was reaped here, so it is not killed later.
            Ok(Some((pid, _))) if Some(pid) == helper => forwarder = None,
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => {
                let _ = writeln!(io::stderr(), "agentguard-relay: waiting failed: {e}");
                return ExitCode::from(125);
            }
        }
    }
}

/// Kills and reaps the forwarder, when there is one still running.
fn stop(forwarder: Option<Child>) {
    if let Some(mut forwarder) = forwarder {
        let _ = forwarder.kill();
        let _ = forwarder.wait();
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
            let _ = one_way(&mut client_in, &proxy_out);
            let _ = proxy_out.shutdown(Shutdown::Write);
        })?;
    let _ = one_way(&mut proxy_in, &client_out);
    let _ = client_out.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}

/// One direction, until `from`'s end of stream: spliced, or copied where splice cannot be.
fn one_way(from: &mut (impl Read + AsFd), mut to: impl AsFd + Write) -> io::Result<()> {
    let forced = std::env::var_os("AGENTGUARD_RELAY_COPY").is_some_and(|v| v == "1");
    if !forced && let Ok((pipe_read, pipe_write)) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC) {
        let size = rustix::pipe::fcntl_setpipe_size(&pipe_write, PIPE).unwrap_or(64 * 1024);
        match spliced(from, &mut to, &pipe_read, &pipe_write, size)? {
            Spliced::Done => return Ok(()),
            Spliced::Unsupported => {}
        }
    }
    copy(from, to)
}

/// What [`spliced`] did.
enum Spliced {
    /// Every byte up to the end of stream.
    Done,
    /// Nothing: the kernel cannot splice these descriptors (the pipe is empty again).
    Unsupported,
}

/// True for the errors of a splice the kernel does not do for these descriptors.
fn unsupported(e: rustix::io::Errno) -> bool {
    [Errno::INVAL, Errno::NOSYS, Errno::OPNOTSUPP].contains(&e)
}

/// Retries a system call interrupted by a signal.
fn retry(mut call: impl FnMut() -> rustix::io::Result<usize>) -> rustix::io::Result<usize> {
    loop {
        match call() {
            Err(Errno::INTR) => continue,
            other => return other,
        }
    }
}

/// `from` to `to` through the pipe, a pipe's worth at a time: the pipe is empty before each
/// read from `from` (so that splice waits only for the socket) and emptied into `to` before
/// the next. Only the first splice of each kind may find the descriptors unsupported; bytes
/// already in the pipe then are copied out before the caller falls back.
fn spliced(
    from: &impl AsFd,
    to: &mut (impl AsFd + Write),
    pipe_read: &OwnedFd,
    pipe_write: &OwnedFd,
    size: usize,
) -> io::Result<Spliced> {
    let flags = SpliceFlags::MOVE;
    let mut first = true;
    loop {
        let n = match retry(|| splice(from, None, pipe_write, None, size, flags)) {
            Err(e) if first && unsupported(e) => return Ok(Spliced::Unsupported),
            other => other?,
        };
        if n == 0 {
            return Ok(Spliced::Done);
        }
        let mut left = n;
        while left > 0 {
            match retry(|| splice(pipe_read, None, &*to, None, left, flags)) {
                Err(e) if first && unsupported(e) => {
                    let mut rest = vec![0u8; left];
                    let mut got = 0;
                    while got < left {
                        got += retry(|| rustix::io::read(pipe_read, &mut rest[got..]))?;
                    }
                    to.write_all(&rest)?;
                    return Ok(Spliced::Unsupported);
                }
                other => left -= other?,
            }
        }
        first = false;
    }
}

fn copy(from: &mut impl Read, mut to: impl Write) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
    }
}

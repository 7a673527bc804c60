//! The relay's data path, run on the host exactly as it runs in a container: `relay PORT
//! SOCKET -- sleep`, a client on 127.0.0.1:PORT and a UNIX server in the proxy's place. Each
//! property holds on the splice path and on the copy it falls back to
//! (`AGENTGUARD_RELAY_COPY=1`), and the test sees which one ran: the forwarder holds a pipe
//! per direction while it splices, none while it copies.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use agentguard_test_support::{eventually_blocking, free_port};

/// The relay this crate embeds, as its build script left it.
const RELAY: &str = concat!(env!("OUT_DIR"), "/agentguard-relay");

/// A relay in front of a UNIX listener, with its forwarder; both killed on drop.
struct Relay {
    port: u16,
    socket: PathBuf,
    listener: UnixListener,
    command: Child,
    _dir: tempfile::TempDir,
}

impl Relay {
    fn start(copy: bool) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let port = free_port();
        let mut command = Command::new(RELAY);
        command.args([
            &port.to_string(),
            socket.to_str().unwrap(),
            "--",
            "sleep",
            "120",
        ]);
        if copy {
            command.env("AGENTGUARD_RELAY_COPY", "1");
        }
        let command = command.spawn().unwrap();
        let relay = Relay {
            port,
            socket,
            listener,
            command,
            _dir: dir,
        };
        eventually_blocking(
            "the relay's forwarder runs",
            Duration::from_secs(10),
            || relay.forwarder(),
        );
        relay
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream
    }

    /// The forwarder's pid: the process whose arguments are `--forward SOCKET`.
    fn forwarder(&self) -> Option<u32> {
        let wanted = format!("--forward\0{}\0", self.socket.display());
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                String::from_utf8_lossy(&cmdline)
                    .contains(&wanted)
                    .then_some(pid)
            })
    }

    /// How many pipe descriptors the forwarder holds open (its stdio may be pipes too).
    fn pipe_fds(&self) -> usize {
        let pid = self.forwarder().expect("the forwarder runs");
        let fds = Path::new("/proc").join(pid.to_string()).join("fd");
        std::fs::read_dir(fds)
            .unwrap()
            .flatten()
            .filter(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.to_string_lossy().starts_with("pipe:"))
            })
            .count()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(pid) = self.forwarder() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = self.command.kill();
        let _ = self.command.wait();
    }
}

/// A byte of a stream that is not the same at every offset, so a lost or repeated chunk shows.
fn pattern(offset: usize) -> u8 {
    (offset % 251) as u8
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

const DOWN: usize = 48 * 1024 * 1024;
const UP: usize = 16 * 1024 * 1024;

/// Both directions at once, 48 MiB down and 16 MiB up, byte for byte: the client's end of
/// stream reaches the server, which still answers after it (a half-closed tunnel keeps
/// flowing the other way), and the server's end of stream reaches the client.
fn both_ways_and_half_close(copy: bool) {
    let relay = Relay::start(copy);
    let before = relay.pipe_fds();
    let mut client = relay.connect();
    let (server, _) = relay.listener.accept().unwrap();
    let server = std::thread::spawn(move || {
        let mut hello = [0u8; 5];
        (&server).read_exact(&mut hello).unwrap();
        (&server).write_all(b"hi\n").unwrap();
        let mut reader = server.try_clone().unwrap();
        let received = std::thread::spawn(move || {
            let mut all = Vec::new();
            reader.read_to_end(&mut all).unwrap();
            all
        });
        let mut writer = &server;
        let down: Vec<u8> = (0..DOWN).map(pattern).collect();
        writer.write_all(&down).unwrap();
        let up = received.join().unwrap();
        // Only after the client's end of stream: the answer to everything it sent.
        writeln!(
            writer,
            "got {} bytes, checksum {:x}",
            up.len(),
            checksum(&up)
        )
        .unwrap();
        server.shutdown(Shutdown::Write).unwrap();
    });
    // One exchange first: both directions are open and have moved bytes.
    client.write_all(b"hello").unwrap();
    let mut hi = [0u8; 3];
    client.read_exact(&mut hi).unwrap();
    let pipes = (relay.pipe_fds() - before) / 2;
    let mut writer = client.try_clone().unwrap();
    let sent = std::thread::spawn(move || {
        let up: Vec<u8> = (0..UP).map(|i| pattern(i + 7)).collect();
        writer.write_all(&up).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
        checksum(&up)
    });
    let mut first = vec![0u8; 1024 * 1024];
    client.read_exact(&mut first).unwrap();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    server.join().unwrap();
    let up_checksum = sent.join().unwrap();
    first.extend_from_slice(&rest);
    let (down, answer) = first.split_at(DOWN.min(first.len()));
    assert_eq!(down.len(), DOWN);
    assert!(
        down.iter().enumerate().all(|(i, b)| *b == pattern(i)),
        "the download arrived out of order or changed"
    );
    assert_eq!(
        String::from_utf8_lossy(answer),
        format!("got {UP} bytes, checksum {up_checksum:x}\n")
    );
    // Two directions: a pipe each while splicing, none when copying.
    assert_eq!(pipes, if copy { 0 } else { 2 }, "copy forced: {copy}");
}

/// A conversation of small messages, each answered before the next is sent: a relay that
/// held bytes in a pipe (or a buffer) until more arrived would hang here.
fn an_exchange_of_small_messages(copy: bool) {
    let relay = Relay::start(copy);
    let mut client = relay.connect();
    let (server, _) = relay.listener.accept().unwrap();
    let server = std::thread::spawn(move || {
        let mut stream: UnixStream = server;
        let mut buf = [0u8; 64];
        loop {
            let n = stream.read(&mut buf).unwrap();
            if n == 0 {
                return;
            }
            let mut reply = b"pong ".to_vec();
            reply.extend_from_slice(&buf[5..n]);
            stream.write_all(&reply).unwrap();
        }
    });
    for i in 0..200 {
        client.write_all(format!("ping {i}\n").as_bytes()).unwrap();
        let want = format!("pong {i}\n");
        let mut got = vec![0u8; want.len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
    client.shutdown(Shutdown::Write).unwrap();
    server.join().unwrap();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

#[test]
fn the_relay_splices_both_ways_and_passes_each_end_of_stream() {
    both_ways_and_half_close(false);
}

#[test]
fn the_relay_forced_to_copy_moves_both_ways_and_passes_each_end_of_stream() {
    both_ways_and_half_close(true);
}

#[test]
fn the_splicing_relay_answers_each_small_message_at_once() {
    an_exchange_of_small_messages(false);
}

#[test]
fn the_copying_relay_answers_each_small_message_at_once() {
    an_exchange_of_small_messages(true);
}

"""Real peers for the Python package's tests: the engine, a DNS server, a TLS upstream.

Everything listens on 127.0.0.1 (the network rule): test names are ``*.test``, answered by
``FakeDns`` (the DNS protocol over UDP); the upstream serves HTTPS with a CA made here by
openssl. A missing engine, runtime or image is SKIPPED with the reason, and fails instead
when ``AGENTGUARD_PY_REQUIRE=1`` (``cargo xtask python`` and CI set it).
"""

from __future__ import annotations

import http.server
import os
import select
import shutil
import socket
import ssl
import struct
import subprocess
import threading
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

IMAGE = os.environ.get("AGENTGUARD_PY_IMAGE", "localhost/agentguard-pytest:2")
ENGINE = os.environ.get("AGENTGUARD_PY_ENGINE", "docker")
REQUIRE = os.environ.get("AGENTGUARD_PY_REQUIRE") == "1"


def missing(what: str) -> None:
    """Fails under AGENTGUARD_PY_REQUIRE=1, else skips loudly."""
    if REQUIRE:
        pytest.fail(f"required but missing: {what}")
    print(f"SKIPPED: {what}")
    pytest.skip(what)


def _engine_problem() -> str:
    if shutil.which(ENGINE) is None:
        return f"{ENGINE} is not on PATH"
    image = subprocess.run([ENGINE, "image", "inspect", IMAGE], capture_output=True)
    if image.returncode != 0:
        return f"the image {IMAGE} is not in {ENGINE}'s store (cargo xtask python builds it)"
    runtimes = subprocess.run(
        [ENGINE, "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True
    )
    if "runsc" not in runtimes.stdout:
        return f"{ENGINE} has no runsc runtime registered (cargo xtask setup registers it)"
    return ""


@pytest.fixture(scope="session")
def engine() -> str:
    """The engine program, with the test image present and runsc registered."""
    problem = _engine_problem()
    if problem:
        missing(problem)
    return ENGINE


def containers(label: str) -> List[str]:
    """The names of the engine's containers (running or not) carrying ``label``."""
    out = subprocess.run(
        [ENGINE, "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in out.stdout.splitlines() if line]


class StartWatch:
    """The engine's event stream for containers carrying ``label``, opened BEFORE the run so
    its start cannot be missed; ``wait()`` returns the first started container's name."""

    def __init__(self, label: str) -> None:
        self.events = subprocess.Popen(
            [ENGINE, "events", "--filter", f"label={label}", "--filter", "event=start",
             "--format", "{{.Actor.Attributes.name}}"],
            stdout=subprocess.PIPE, text=True,
        )

    def wait(self, timeout: float = 120.0) -> str:
        assert self.events.stdout is not None
        ready, _, _ = select.select([self.events.stdout], [], [], timeout)
        assert ready, f"no container started within {timeout} s"
        return self.events.stdout.readline().strip()

    def close(self) -> None:
        self.events.kill()
        self.events.wait()


class FakeDns:
    """A DNS server on 127.0.0.1 answering every A query with ``address`` (TTL 60), and
    every other type with no answer and an SOA (a negative answer, as a real zone gives)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.queries: List[Tuple[str, int]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def nameserver(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            reply = self._answer(data)
            if reply:
                self.sock.sendto(reply, peer)

    def _answer(self, data: bytes) -> bytes:
        if len(data) < 12:
            return b""
        (ident,) = struct.unpack("!H", data[:2])
        at, labels = 12, []
        while at < len(data) and data[at] != 0:
            size = data[at]
            labels.append(data[at + 1 : at + 1 + size].decode("ascii", "replace"))
            at += 1 + size
        question = data[12 : at + 5]
        qtype, _ = struct.unpack("!HH", data[at + 1 : at + 5])
        self.queries.append((".".join(labels), qtype))
        if qtype == 1:
            rdata = socket.inet_aton(self.address)
            answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + rdata
            header = struct.pack("!HHHHHH", ident, 0x8180, 1, 1, 0, 0)
            return header + question + answer
        soa_rdata = (
            b"\x02ns\x04test\x00\x0ahostmaster\x04test\x00"
            + struct.pack("!IIIII", 1, 3600, 600, 86400, 60)
        )
        soa = b"\x04test\x00" + struct.pack("!HHIH", 6, 1, 60, len(soa_rdata)) + soa_rdata
        header = struct.pack("!HHHHHH", ident, 0x8180, 1, 0, 1, 0)
        return header + question + soa

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def dns_loopback() -> Iterator[FakeDns]:
    """Every name is 127.0.0.1."""
    server = FakeDns("127.0.0.1")
    yield server
    server.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        body = f"hello from {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class TlsUpstream:
    """An HTTPS server on 127.0.0.1 for ``api.test`` with a CA made here (``ca_file``)."""

    def __init__(self, folder: Path) -> None:
        self.ca_file = folder / "ca.pem"
        key, csr, cert, ext = (folder / n for n in ("leaf.key", "leaf.csr", "leaf.pem", "ext"))
        ca_key = folder / "ca.key"

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
                "-out", str(self.ca_file), "-days", "2", "-subj", "/CN=agentguard test CA")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                "-subj", "/CN=api.test")
        ext.write_text("subjectAltName=DNS:api.test\n")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca_file), "-CAkey",
                str(ca_key), "-CAcreateserial", "-out", str(cert), "-days", "2",
                "-extfile", str(ext))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[TlsUpstream]:
    if shutil.which("openssl") is None:
        missing("openssl is not on PATH (it makes the test CA)")
    server = TlsUpstream(tmp_path)
    yield server
    server.close()

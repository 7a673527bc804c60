"""``agentguard egress-proxy --metrics``: ``/metrics`` read by a real Prometheus text parser
(``prometheus_client``'s), every counter checked against the proxy's own audit log.

The binary is ``AGENTGUARD_PY_CLI``; everything listens on 127.0.0.1 and names are ``*.test``
answered by ``FakeDns``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

from conftest import FakeDns, missing


def _echo_server() -> Tuple[socket.socket, int]:
    """A TCP echo server on 127.0.0.1 that closes when its client does."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def serve(conn: socket.socket) -> None:
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


def _connect(proxy: Tuple[str, int], target: str) -> Tuple[int, socket.socket]:
    conn = socket.create_connection(proxy, timeout=10)
    conn.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = conn.recv(1)
        if not byte:
            break
        head += byte
    return int(head.split(b" ")[1]), conn


def _events(log: Path) -> List[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _wait(log: Path, count: int, kind: str) -> None:
    deadline = time.monotonic() + 10
    while sum(e["kind"] == kind for e in _events(log)) < count:
        assert time.monotonic() < deadline, _events(log)
        time.sleep(0.02)


def test_metrics_parse_as_prometheus_text_and_match_the_audit_log(
    dns_loopback: FakeDns, tmp_path: Path
) -> None:
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        missing("prometheus_client (the venv of `cargo xtask python` installs it)")
    cli = os.environ.get("AGENTGUARD_PY_CLI")
    if not cli:
        missing("AGENTGUARD_PY_CLI (the agentguard binary) is not set")
    echo, port = _echo_server()
    policy, log = tmp_path / "policy.toml", tmp_path / "egress.jsonl"
    rules = (
        f'allow_ports = [{port}]\nallow_cidrs = ["127.0.0.1/32"]\n'
        f'nameservers = ["{dns_loopback.nameserver}"]\n'
    )
    policy.write_text('allow = ["pkgs.example.test", "files.example.test"]\n' + rules)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        metrics_port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [cli, "egress-proxy", "--port", "0", "--policy", str(policy), "--audit", str(log),
         "--metrics", f"127.0.0.1:{metrics_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        host, _, proxy_port = proc.stdout.readline().strip().split(" ")[-1].rpartition(":")
        proxy = (host, int(proxy_port))
        for payload in (b"x" * 1000, b"y" * 2345):
            code, conn = _connect(proxy, f"pkgs.example.test:{port}")
            assert code == 200
            conn.sendall(payload)
            got = b""
            while len(got) < len(payload):
                got += conn.recv(65536)
            conn.close()
        assert _connect(proxy, f"evil.example.test:{port}")[0] == 403
        assert _connect(proxy, "pkgs.example.test:1")[0] == 403
        # A load that fails, then one that narrows: generation 2, one failure.
        policy.write_text("allow = [\n")
        proc.send_signal(signal.SIGHUP)
        _wait(log, 2, "policy_loaded")
        policy.write_text('allow = ["pkgs.example.test"]\n' + rules)
        proc.send_signal(signal.SIGHUP)
        _wait(log, 3, "policy_loaded")
        _wait(log, 2, "egress_close")
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        samples: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        events = _events(log)
        decisions = Counter(
            (e["decision"], e["reason"]) for e in events
            if e["kind"] in ("egress_connect", "egress_route")
        )
        counted = {
            (labels[0][1], labels[1][1]): value
            for (name, labels), value in samples.items()
            if name == "agentguard_egress_decisions_total"
        }
        assert counted == dict(decisions), (counted, decisions)
        assert decisions[("deny", "domain_not_allowed")] == 1
        assert decisions[("deny", "port_not_allowed")] == 1
        closes = [e for e in events if e["kind"] == "egress_close"]
        up = sum(e["data"]["bytes_up"] for e in closes)
        assert up == 3345
        assert samples[("agentguard_egress_bytes_total", (("direction", "up"),))] == up
        down = sum(e["data"]["bytes_down"] for e in closes)
        assert samples[("agentguard_egress_bytes_total", (("direction", "down"),))] == down
        assert samples[("agentguard_egress_tunnels_open", ())] == 0
        assert samples[("agentguard_egress_connect_seconds_count", ())] == len(closes)
        assert samples[("agentguard_egress_connect_seconds_bucket", (("le", "+Inf"),))] == 2
        assert samples[("agentguard_policy_generation", ())] == 2
        assert samples[("agentguard_policy_reload_failures_total", ())] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        echo.close()

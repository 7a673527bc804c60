"""EgressProxy in-process, with curl as the client and a local TLS upstream behind it."""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import IMAGE, FakeDns, TlsUpstream, missing

from agentguard import audit
from agentguard.execution import ContainerExecutor
from agentguard.execution.egress import EgressProxy


def curl(proxy: EgressProxy, url: str, ca_file: Path) -> subprocess.CompletedProcess:
    if shutil.which("curl") is None:
        missing("curl is not on PATH (cargo xtask setup installs it)")
    return subprocess.run(
        ["curl", "-sS", "--max-time", "20", "--proxy", proxy.url, "--cacert", str(ca_file),
         "-o", "-", "-w", "\n%{http_code} %{http_connect}", url],
        capture_output=True, text=True,
    )


def make(upstream: TlsUpstream, dns: FakeDns, **kw: Any) -> EgressProxy:
    return EgressProxy(["api.test"], allow_ports=[upstream.port], allow_cidrs=["127.0.0.0/8"],
                       nameservers=[dns.nameserver], **kw)


def test_on_decision_sees_allow_and_deny_for_curl(
    dns_loopback: FakeDns, upstream: TlsUpstream, tmp_path: Path
) -> None:
    decisions: List[Dict[str, Any]] = []
    log = tmp_path / "egress.jsonl"
    proxy = make(upstream, dns_loopback, on_decision=decisions.append, audit=log)
    host, port = proxy.start()
    assert host == "127.0.0.1" and port > 0
    try:
        ok = curl(proxy, f"https://api.test:{upstream.port}/pkg", upstream.ca_file)
        denied = curl(proxy, f"https://other.test:{upstream.port}/", upstream.ca_file)
    finally:
        assert proxy.stop()
    assert "hello from /pkg" in ok.stdout and ok.stdout.endswith("200 200"), ok
    assert denied.returncode != 0 and "403" in denied.stdout + denied.stderr, denied
    connects = sorted((d["decision"], d["reason"], d["subject"]["target"])
                      for d in decisions if d["kind"] == "egress_connect")
    assert connects == [
        ("allow", "ok", f"api.test:{upstream.port}"),
        ("deny", "domain_not_allowed", f"other.test:{upstream.port}"),
    ]
    assert any(d["kind"] == "egress_close" for d in decisions)
    # The callback saw exactly what the chained log holds.
    records = audit.read(log)
    assert sorted(r["kind"] for r in records) == sorted(d["kind"] for d in decisions)
    assert audit.verify(log).ok


def test_a_raising_callback_is_logged_once_and_never_stops_the_proxy(
    dns_loopback: FakeDns, upstream: TlsUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(event: Dict[str, Any]) -> None:
        raise RuntimeError("callback bug")

    with caplog.at_level(logging.ERROR, logger="agentguard.egress"):
        with make(upstream, dns_loopback, on_decision=explode) as proxy:
            for _ in range(3):
                got = curl(proxy, f"https://api.test:{upstream.port}/", upstream.ca_file)
                assert got.stdout.endswith("200 200"), got
    assert proxy.callback_errors >= 3
    logged = [r for r in caplog.records if "on_decision raised" in r.getMessage()]
    assert len(logged) == 1


def test_a_slow_callback_never_stalls_tunnels_and_a_full_queue_is_counted(
    dns_loopback: FakeDns, upstream: TlsUpstream, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    seen: List[Dict[str, Any]] = []

    def blocked(event: Dict[str, Any]) -> None:
        release.wait()
        seen.append(event)

    log = tmp_path / "egress.jsonl"
    proxy = make(upstream, dns_loopback, on_decision=blocked, audit=log, queue_size=2)
    proxy.start()
    # Every request completes while the callback is still blocked on its first event.
    for _ in range(5):
        got = curl(proxy, f"https://api.test:{upstream.port}/", upstream.ca_file)
        assert got.stdout.endswith("200 200"), got
    assert seen == []
    release.set()
    with caplog.at_level(logging.WARNING, logger="agentguard.egress"):
        proxy.stop()
    recorded = len(audit.read(log))
    assert recorded >= 10
    assert proxy.dropped_decisions > 0
    assert len(seen) + proxy.dropped_decisions == recorded
    assert any("did not reach on_decision" in r.getMessage() for r in caplog.records)


def test_the_operators_floor_binds_an_egress_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    floor = tmp_path / "floor.toml"
    floor.write_text('allow = ["*.example.com"]\n')
    monkeypatch.setenv("AGENTGUARD_FLOOR", str(floor))
    with pytest.raises(ValueError, match="AGENTGUARD_FLOOR") as raised:
        EgressProxy(["other.test"]).start()
    assert 'allow "other.test"' in str(raised.value), str(raised.value)
    proxy = EgressProxy(["pkgs.example.com"])
    proxy.start()
    proxy.stop()


def test_the_seed_snippet_and_settings_errors(dns_loopback: FakeDns) -> None:
    decisions: List[Dict[str, Any]] = []
    # The seed's snippet, as written.
    proxy = EgressProxy(["pkgs.example.com"], on_decision=decisions.append)
    host, port = proxy.start()  # background thread; proxy.stop() when done
    assert (host, port) == proxy.address
    with pytest.raises(RuntimeError):
        proxy.start()
    proxy.stop()
    assert proxy.stop()  # stopping twice is harmless
    with pytest.raises(ValueError, match="allow"):
        EgressProxy("pkgs.example.com")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host"):
        EgressProxy(["pkgs.example.com"], host="localhost").start()
    with pytest.raises(ValueError, match="queue"):
        EgressProxy(["pkgs.example.com"], queue_size=0).start()


FETCH = """
import ssl, sys, urllib.request
context = ssl.create_default_context(cafile='/workspace/ca.pem')
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, context=context, timeout=20) as r:
            print(url, r.status, r.read().decode().strip())
    except Exception as e:
        print(url, 'refused', type(e).__name__)
"""


def fetch_workspace(upstream: TlsUpstream, tmp_path: Path) -> "tuple[Path, str, str]":
    """A workspace holding the test CA, readable by the container's user, and FETCH's two
    URLs: one on the allowlist, one off it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "ca.pem").write_bytes(upstream.ca_file.read_bytes())
    ws.chmod(0o755)
    (ws / "ca.pem").chmod(0o644)
    return ws, f"https://api.test:{upstream.port}/pkg", f"https://other.test:{upstream.port}/"


def test_a_container_reaches_only_its_allowlist_through_its_own_proxy(
    engine: str, dns_loopback: FakeDns, upstream: TlsUpstream, tmp_path: Path
) -> None:
    ws, allowed, other = fetch_workspace(upstream, tmp_path)
    tools = ContainerExecutor(
        IMAGE, {"fetch": ["python3", "-c", FETCH, allowed, other]}, engine=engine,
        runtime="runsc", workspace=ws, network="egress", audit=tmp_path / "audit.jsonl",
        egress={"allow": ["api.test"], "allow_ports": [upstream.port],
                "allow_cidrs": ["127.0.0.0/8"], "nameservers": [dns_loopback.nameserver]},
    )
    result = tools.run("fetch")
    assert result.ok, result
    assert f"{allowed} 200 hello from /pkg" in result.stdout, result.stdout
    assert f"{other} refused" in result.stdout, result.stdout
    assert result.egress == {"allowed": 1, "denied": 1}, result.egress
    # Issue 36: what was refused, grouped, in the result and in its dict form.
    refused = [{"target": f"other.test:{upstream.port}", "reason": "domain_not_allowed",
                "count": 1}]
    assert result.egress_refused == refused, result.egress_refused
    assert result.to_dict()["egress_refused"] == refused
    kinds = [(r["kind"], r["decision"]) for r in audit.read(tmp_path / "audit.jsonl")]
    assert ("egress_connect", "allow") in kinds and ("egress_connect", "deny") in kinds
    assert kinds[-1] == ("container_run", "allow")


def test_observe_run(
    engine: str, dns_loopback: FakeDns, upstream: TlsUpstream, tmp_path: Path
) -> None:
    """Issue 36: run(name, observe=True) lets a public (here: allow_cidrs) host the policy
    refuses through and reports it; only run takes it, strictly a bool; none refuses it."""
    ws, allowed, other = fetch_workspace(upstream, tmp_path)
    tools = ContainerExecutor(
        IMAGE, {"fetch": ["python3", "-c", FETCH, allowed, other],
                "offline": {"argv": ["true"], "network": "none"}},
        engine=engine, runtime="runsc", workspace=ws, network="egress",
        audit=tmp_path / "audit.jsonl",
        egress={"allow": ["api.test"], "allow_ports": [upstream.port],
                "allow_cidrs": ["127.0.0.0/8"], "nameservers": [dns_loopback.nameserver]},
    )
    result = tools.run("fetch", observe=True)
    assert result.egress == {"allowed": 2, "denied": 0}, result
    observed = [{"target": f"other.test:{upstream.port}", "reason": "observed", "count": 1}]
    assert result.egress_observed == observed, result.egress_observed
    assert result.egress_refused == []
    reasons = [r["reason"] for r in audit.read(tmp_path / "audit.jsonl")
               if r["kind"] == "egress_connect"]
    assert reasons == ["ok", "observed"], reasons
    # Without observe the same call is refused again: observe lasted one run.
    assert tools.run("fetch").egress == {"allowed": 1, "denied": 1}
    with pytest.raises(TypeError, match="observe must be True or False"):
        tools.run("fetch", observe="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nothing to observe"):
        tools.run("offline", observe=True)

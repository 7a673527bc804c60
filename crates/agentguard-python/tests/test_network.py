"""NetworkExecutor: DNS pinning against a local DNS server and a local TLS upstream."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeDns, TlsUpstream

from agentguard import audit, errors
from agentguard.execution import NetworkExecutor


def test_a_rebinding_answer_is_refused_before_any_connection(dns_loopback: FakeDns) -> None:
    # The name resolves to a loopback address: not public, so nothing is dialed.
    fetcher = NetworkExecutor(["api.test"], nameservers=[dns_loopback.nameserver])
    with pytest.raises(errors.Refused) as raised:
        fetcher.fetch("https://api.test/")
    assert raised.value.reason == "non_public_address"
    assert ("api.test", 1) in dns_loopback.queries


def test_a_host_off_the_allowlist_costs_no_dns_query(dns_loopback: FakeDns) -> None:
    fetcher = NetworkExecutor(["api.test"], nameservers=[dns_loopback.nameserver])
    with pytest.raises(errors.Refused) as raised:
        fetcher.fetch("https://other.test/")
    assert raised.value.reason == "domain_not_allowed"
    assert dns_loopback.queries == []
    with pytest.raises(errors.Refused) as raised:
        fetcher.fetch("https://api.test:8443/")
    assert raised.value.reason == "port_not_allowed"


def test_an_allowed_fetch_verifies_tls_and_reports_the_address_dialed(
    dns_loopback: FakeDns, upstream: TlsUpstream, tmp_path: Path
) -> None:
    fetcher = NetworkExecutor(
        ["api.test"], allow_ports=[upstream.port], allow_cidrs=["127.0.0.0/8"],
        nameservers=[dns_loopback.nameserver], ca_file=upstream.ca_file,
        audit=tmp_path / "fetch.jsonl",
    )
    response = fetcher.fetch(f"https://api.test:{upstream.port}/docs")
    assert response.status == 200
    assert response.text() == "hello from /docs\n"
    assert response.dialed == f"127.0.0.1:{upstream.port}"
    assert response.header("content-type") == "text/plain; charset=utf-8"
    # Without the test CA, the same upstream is refused: TLS is verified.
    untrusted = NetworkExecutor(["api.test"], allow_ports=[upstream.port],
                                allow_cidrs=["127.0.0.0/8"],
                                nameservers=[dns_loopback.nameserver])
    with pytest.raises(errors.AgentGuardError) as raised:
        untrusted.fetch(f"https://api.test:{upstream.port}/docs")
    assert raised.value.reason is not None and "tls" in raised.value.reason
    assert audit.verify(tmp_path / "fetch.jsonl").events == 1


def test_invalid_settings_raise_value_error_naming_the_key() -> None:
    with pytest.raises(ValueError, match="allow"):
        NetworkExecutor("api.test")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allow_cidrs"):
        NetworkExecutor(["api.test"], allow_cidrs=["not-a-range"])
    with pytest.raises(ValueError, match="nameserver"):
        NetworkExecutor(["api.test"], nameservers=["localhost"])

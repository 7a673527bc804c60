"""Typed use of the public API: ``mypy --strict`` must accept it (test_types.py)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from agentguard import audit, errors
from agentguard.execution import ContainerExecutor, NetworkExecutor, Response, RunResult
from agentguard.execution.egress import EgressProxy


def run_tests(executor: ContainerExecutor) -> Tuple[int, str]:
    result: RunResult = executor.run("run_tests", path="tests/test_api.py")
    code: Optional[int] = result.exit_code
    return (code if code is not None else -1), result.status


def as_tool(executor: ContainerExecutor) -> Dict[str, Any]:
    try:
        return executor("run_tests")
    except errors.AgentGuardError as e:
        reason: Optional[str] = e.reason
        return {"error": str(e), "reason": reason}


def fetch(url: str) -> bytes:
    response: Response = NetworkExecutor(["docs.example.com"]).fetch(url)
    return response.body + response.text().encode()


def proxy() -> Tuple[str, int]:
    decisions: List[Dict[str, Any]] = []
    with EgressProxy(["pkgs.example.com"], on_decision=decisions.append) as running:
        address: Tuple[str, int] = running.address
    return address


def verified(path: str) -> bool:
    report: audit.VerifyReport = audit.verify(path, key=b"k" * 32)
    return bool(report) and report.events >= 0

"""fork() (multiprocessing's default start method up to CPython 3.13), issue 34, item 11: a
child forked from a process that started agentguard gets a clear exception for anything
made before the fork (and for new objects, whose runtime would be the parent's), never a
hang or a crash, and the parent is never affected. A child of a process that never started
agentguard makes its own objects, with its own runtime, and they work."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
from typing import Optional, Tuple

import pytest
from conftest import IMAGE

from agentguard.errors import AgentGuardError
from agentguard.execution import ContainerExecutor

# Set by the test before the pool forks; the children inherit it.
EXECUTOR: Optional[ContainerExecutor] = None


def _outcome(call) -> Tuple[str, Optional[str]]:
    try:
        return ("ran", str(call().exit_code))
    except AgentGuardError as error:
        return (type(error).__name__, error.reason)


def _in_child(which: str) -> Tuple[str, Optional[str]]:
    if which == "inherited":
        assert EXECUTOR is not None
        return _outcome(lambda: EXECUTOR.run("ok"))
    return _outcome(
        lambda: ContainerExecutor(IMAGE, {"ok": ["true"]}, engine="docker", timeout=60).run("ok")
    )


@pytest.mark.timeout(300)
def test_a_fork_pool_child_gets_a_clear_exception_and_the_parent_goes_on(engine: str) -> None:
    global EXECUTOR
    EXECUTOR = ContainerExecutor(IMAGE, {"ok": ["true"]}, engine=engine, timeout=60)
    assert EXECUTOR.run("ok").exit_code == 0
    with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map(_in_child, ["inherited", "fresh", "inherited", "fresh"])
    assert got == [("AgentGuardError", "forked")] * 4, got
    # The parent's next runs are untouched.
    for _ in range(3):
        assert EXECUTOR.run("ok").exit_code == 0


@pytest.mark.timeout(300)
def test_a_child_of_a_process_that_never_started_agentguard_runs_its_own(engine: str) -> None:
    script = textwrap.dedent(
        f"""
        import multiprocessing
        from agentguard.execution import ContainerExecutor

        def child(_):
            tools = ContainerExecutor({IMAGE!r}, {{"ok": ["true"]}}, engine={engine!r}, timeout=60)
            return tools.run("ok").exit_code

        if __name__ == "__main__":
            with multiprocessing.get_context("fork").Pool(2) as pool:
                print(pool.map(child, range(2)))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0, 0]", out.stdout + out.stderr

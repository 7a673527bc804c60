"""Ctrl-C during a run: the container is killed and removed, then KeyboardInterrupt is raised."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Tuple

from conftest import IMAGE, StartWatch, containers

CHILD = f"""
import sys
from agentguard.execution import ContainerExecutor
slow = ContainerExecutor({IMAGE!r}, {{"hang": ["sleep", "120"]}}, engine=sys.argv[1],
                         runtime="runsc")
try:
    slow.run("hang")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
"""


def test_ctrl_c_in_a_subprocess_leaves_no_container(engine: str) -> None:
    child, owner, out, err = interrupt_once_started(CHILD, engine, dict(os.environ))
    assert child.returncode != 0
    assert "interrupted" in out, (out, err)
    assert "KeyboardInterrupt" in err, err
    assert containers(owner) == []


EGRESS_CHILD = f"""
import sys
from agentguard.execution import ContainerExecutor
slow = ContainerExecutor({IMAGE!r}, {{"hang": ["sleep", "120"]}}, engine=sys.argv[1],
                         runtime="runsc", network="egress",
                         egress={{"allow": ["pkgs.example.com"]}})
try:
    slow.run("hang")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
"""


def test_ctrl_c_during_an_egress_run_removes_its_folder_and_container(
    engine: str, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    env = dict(os.environ, AGENTGUARD_RUN_DIR=str(runs))
    folders: list = []
    child, owner, out, err = interrupt_once_started(
        EGRESS_CHILD, engine, env, lambda: folders.extend(runs.iterdir())
    )
    assert len(folders) == 1, folders  # the run's folder: its proxy socket and the relay
    assert "interrupted" in out and "KeyboardInterrupt" in err, (out, err)
    assert containers(owner) == []
    assert list(runs.iterdir()) == []


def interrupt_once_started(
    script: str, engine: str, env: Dict[str, str], while_running: Callable[[], None] = lambda: None
) -> Tuple["subprocess.Popen[str]", str, str, str]:
    """Runs ``script`` in a child, waits for its container's start event, calls
    ``while_running``, sends SIGINT, and returns the child, its owner label and its output."""
    # Every container of the child carries its pid as owner; the watch is opened first.
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()\n" + script,
                              engine], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    owner = f"agentguard.owner={child.pid}"
    watch = StartWatch(owner)
    try:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.close()
        child.stdin = None  # closed: communicate() must not flush it
        started = watch.wait()
        assert started in containers(owner), (started, containers(owner))
        while_running()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        watch.close()
        if child.poll() is None:
            child.kill()
    return child, owner, out, err

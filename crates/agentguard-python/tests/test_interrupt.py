"""Ctrl-C during a run: the container is killed and removed, then KeyboardInterrupt is raised."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import IMAGE, containers

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
    child = subprocess.Popen([sys.executable, "-c", CHILD, engine],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    owner = f"agentguard.owner={child.pid}"
    try:
        for _ in range(600):
            if containers(owner) or child.poll() is not None:
                break
            time.sleep(0.1)
        assert containers(owner), f"the run never started: {child.communicate()}"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
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
    child = subprocess.Popen([sys.executable, "-c", EGRESS_CHILD, engine], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    owner = f"agentguard.owner={child.pid}"
    try:
        for _ in range(600):
            if containers(owner) or child.poll() is not None:
                break
            time.sleep(0.1)
        assert containers(owner), f"the run never started: {child.communicate()}"
        folders = [p for p in runs.iterdir()]
        assert len(folders) == 1, folders  # the run's folder: its proxy socket and the relay
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert "interrupted" in out and "KeyboardInterrupt" in err, (out, err)
    assert containers(owner) == []
    assert list(runs.iterdir()) == []

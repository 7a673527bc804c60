"""Ctrl-C during a run: the container is killed and removed, then KeyboardInterrupt is raised."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

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

"""The package is typed: ``mypy --strict`` accepts a sample written against it (py.typed,
the native module's stubs), and rejects a sample that misuses it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def mypy(path: Path) -> subprocess.CompletedProcess:
    try:
        import mypy  # noqa: F401
    except ImportError:
        from conftest import missing

        missing("mypy is not installed in this venv")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        capture_output=True, text=True, cwd=HERE,
    )


def test_mypy_strict_accepts_the_typed_sample() -> None:
    got = mypy(HERE / "typed_sample.py")
    assert got.returncode == 0, got.stdout + got.stderr


def test_mypy_strict_rejects_a_misuse(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from agentguard.execution import ContainerExecutor\n"
        "code: str = ContainerExecutor('i', {}).run('t').exit_code\n"
    )
    got = mypy(bad)
    assert got.returncode != 0 and "Incompatible types" in got.stdout, got.stdout

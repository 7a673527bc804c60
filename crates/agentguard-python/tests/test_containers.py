"""ContainerExecutor on real Docker with gVisor (runsc): the seed's snippet, the outcomes, the
errors, and the hardening as the command sees it from inside."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import threading
from pathlib import Path
from typing import Optional

import pytest
from conftest import IMAGE, StartWatch, containers, missing

from agentguard import audit, errors
from agentguard.execution import ContainerExecutor, RunResult

PYTEST = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with ./workspace holding one passing and one failing test, as the cwd."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "test_sample.py").write_text(
        "def test_passes():\n    assert 1 + 1 == 2\n\n"
        "def test_fails():\n    assert 'agent' == 'guard'\n"
    )
    os.chmod(ws, 0o755)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_seed_snippet_runs_as_written(engine: str, project: Path) -> None:
    # The seed's snippet (DESIGN.md), the image name aside.
    tests = ContainerExecutor(
        IMAGE,
        {"run_tests": PYTEST},
        workspace="./workspace",  # mounted at /workspace, read-only by default
        runtime="runsc",  # gVisor
        timeout=300,
        check=False,  # return failing tests as results instead of raising
    )
    result = tests.run("run_tests")
    assert isinstance(result, RunResult)
    assert result.status == "exited" and result.exit_code == 1, result
    assert "1 failed, 1 passed" in result.stdout, result.stdout
    assert not result.timed_out and result.egress is None and result.params == {}
    assert result.container.startswith("agentguard-")
    as_dict = tests("run_tests")
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert as_dict["status"] == "exited" and as_dict["reason"] == "command_failed"
    assert as_dict["exit_code"] == 1 and "1 failed, 1 passed" in as_dict["stdout"]


def test_check_true_raises_command_failed_with_the_result(engine: str, project: Path) -> None:
    tests = ContainerExecutor(IMAGE, {"run_tests": PYTEST}, workspace="./workspace",
                              engine=engine, runtime="runsc", check=True)
    with pytest.raises(errors.CommandFailed) as raised:
        tests.run("run_tests")
    assert raised.value.result.exit_code == 1
    assert "1 failed, 1 passed" in raised.value.result.stdout
    assert raised.value.reason == "command_failed"
    # The tool form returns the failure to the model instead of raising.
    assert tests("run_tests")["reason"] == "command_failed"


def test_an_unknown_name_is_not_allowed_and_never_reaches_the_engine(
    engine: str, tmp_path: Path
) -> None:
    calls = tmp_path / "engine-calls"
    wrapper = tmp_path / "bin" / "docker"
    wrapper.parent.mkdir()
    real = __import__("shutil").which(engine)
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    tests = ContainerExecutor(IMAGE, {"run_tests": PYTEST}, engine=str(wrapper),
                              runtime="runsc", audit=tmp_path / "audit.jsonl")
    with pytest.raises(errors.NotAllowed) as raised:
        tests.run("rm_rf")
    assert raised.value.reason == "command_not_allowed"
    assert "rm_rf" in str(raised.value)
    assert not calls.exists() or calls.read_text() == ""
    refused = tests("rm_rf")
    assert refused["reason"] == "command_not_allowed"
    assert not calls.exists() or calls.read_text() == ""
    # Both refusals are in the chained log, which verifies.
    report = audit.verify(tmp_path / "audit.jsonl")
    assert report.ok and report.events == 2, report
    records = audit.read(tmp_path / "audit.jsonl")
    assert [(r["kind"], r["decision"], r["reason"]) for r in records] == [
        ("container_run", "deny", "command_not_allowed")
    ] * 2
    # Each says which config and who (issue 37): the digest of the keyword arguments'
    # canonical JSON, and this Python process as the invoker.
    digests = {r["data"]["config_sha256"] for r in records}
    assert len(digests) == 1 and len(next(iter(digests))) == 64, records
    invoker = records[0]["data"]["invoker"]
    assert invoker["pid"] == os.getpid() and invoker["uid"] == os.getuid(), invoker
    assert records[0]["data"]["agentguard_version"], records[0]
    # The CLI's verifier reads the log the Python package wrote: one format.
    cli = os.environ.get("AGENTGUARD_PY_CLI")
    if cli is None:
        missing("AGENTGUARD_PY_CLI (the agentguard binary) is not set")
    verified = subprocess.run([cli, "audit", "verify", str(tmp_path / "audit.jsonl")],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr


def test_typed_params_are_keyword_arguments_and_refused_values_raise(
    engine: str, tmp_path: Path
) -> None:
    echo = {"argv": ["echo", "{times}"],
            "params": {"times": {"type": "integer", "min": 1, "max": 5}}}
    tools = ContainerExecutor(IMAGE, {"echo": echo}, engine=engine, runtime="runsc")
    result = tools.run("echo", times=3)
    assert result.stdout == "3\n" and result.params == {"times": 3}
    for bad in ({"times": 9}, {"times": "3; rm -rf /"}, {"times": True}, {"nope": 1}):
        with pytest.raises(errors.InvalidArguments) as raised:
            tools.run("echo", **bad)
        assert raised.value.reason == "invalid_arguments"
        assert isinstance(raised.value, ValueError)
    assert tools("echo", times=9)["reason"] == "invalid_arguments"


HARDENING_PROBE = """
import os, pathlib
status = pathlib.Path('/proc/self/status').read_text()
field = lambda k: next((l.split(':', 1)[1].strip() for l in status.splitlines() if l.startswith(k)), 'absent')
print('uid', os.getuid(), os.getgid())
print('nnp', field('NoNewPrivs'))
print('capeff', field('CapEff'))
print('links', sorted(os.listdir('/sys/class/net')))
# /var/tmp is world-writable (1777) on the root filesystem: only a read-only root refuses it.
print('vartmp_mode', oct(os.stat('/var/tmp').st_mode & 0o7777))
try:
    open('/var/tmp/agentguard-probe', 'w')
    print('root writable')
except OSError as e:
    print('root', e.errno)
print('env', sorted(os.environ))
"""


@pytest.mark.parametrize("runtime", ["runsc", None])
def test_the_hardening_holds_inside_the_container(
    engine: str, runtime: Optional[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTGUARD_HOST_SECRET", "must-not-leak")
    probe = ContainerExecutor(IMAGE, {"probe": ["python3", "-c", HARDENING_PROBE]},
                              engine=engine, runtime=runtime, environment={"GIVEN": "yes"})
    out = probe.run("probe")
    assert out.ok, out
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["uid"] == "65534 65534"
    # gVisor's /proc does not show NoNewPrivs (ENGINES.md); runc's shows it set.
    assert lines["nnp"] == "1" if runtime is None else lines["nnp"] in {"1", "absent"}
    assert lines["capeff"] == "0000000000000000"
    assert lines["links"] == "['lo']"
    assert lines["vartmp_mode"] == "0o1777"
    assert lines["root"] == "30", "the root filesystem must be read-only (EROFS)"
    env = lines["env"]
    assert "GIVEN" in env and "AGENTGUARD_HOST_SECRET" not in env, env
    assert "HTTPS_PROXY" not in env and "https_proxy" not in env


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_engine_oci_holds_the_same_hardening_and_kills_on_timeout(
    engine: str, runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """engine="oci" (runc or runsc called directly, the image from the engine's store) is
    taken like any engine: the same probe sees the same hardening, and a timeout kills."""
    monkeypatch.setenv("AGENTGUARD_HOST_SECRET", "must-not-leak")
    probe = ContainerExecutor(IMAGE, {"probe": ["python3", "-c", HARDENING_PROBE],
                                      "hang": ["sleep", "60"]},
                              engine="oci", runtime=runtime, environment={"GIVEN": "yes"},
                              timeout=5)
    out = probe.run("probe")
    assert out.ok, out
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["uid"] == "65534 65534"
    assert lines["nnp"] == "1" if runtime == "runc" else lines["nnp"] in {"1", "absent"}
    assert lines["capeff"] == "0000000000000000"
    assert lines["links"] == "['lo']"
    assert lines["root"] == "30", "the root filesystem must be read-only (EROFS)"
    env = lines["env"]
    assert "GIVEN" in env and "AGENTGUARD_HOST_SECRET" not in env, env
    hung = probe.run("hang")
    assert hung.status == "timed_out" and hung.timed_out, hung


def test_a_timeout_kills_the_container(engine: str) -> None:
    slow = ContainerExecutor(IMAGE, {"hang": ["sleep", "60"]}, engine=engine,
                             runtime="runsc", timeout=2)
    result = slow.run("hang")
    assert result.status == "timed_out" and result.timed_out, result
    assert result.container not in containers("agentguard.owner")
    assert slow("hang")["status"] == "timed_out"


def test_threads_share_one_executor_and_asyncio_awaits_runs(engine: str) -> None:
    tools = ContainerExecutor(IMAGE, {"hello": ["echo", "hello"]}, engine=engine,
                              runtime="runsc")
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(tools.run("hello")))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.stdout for r in results] == ["hello\n"] * 3
    assert len({r.container for r in results}) == 3

    async def both() -> list:
        return list(await asyncio.gather(tools.arun("hello"), tools.arun("hello")))

    assert [r.stdout for r in asyncio.run(both())] == ["hello\n"] * 2


def test_cancelling_arun_kills_the_container(engine: str) -> None:
    slow = ContainerExecutor(IMAGE, {"hang": ["sleep", "60"]}, engine=engine,
                             runtime="runsc")
    owner = f"agentguard.owner={os.getpid()}"

    async def cancel_once_started(watch: StartWatch) -> None:
        task = asyncio.ensure_future(slow.arun("hang"))
        started = await asyncio.get_running_loop().run_in_executor(None, watch.wait)
        assert started in containers(owner)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    watch = StartWatch(owner)
    try:
        asyncio.run(cancel_once_started(watch))
    finally:
        watch.close()
    assert containers(owner) == []


@pytest.mark.parametrize(
    "keys, named",
    [
        ({"memory": "lots"}, "memory"),
        ({"network": "host"}, "network"),
        ({"pull": "always"}, "pull"),
        ({"workspace_mode": "rw"}, "workspace"),
        ({"runtime": "runsc --debug"}, "runtime"),
        ({"egress": {"allow": ["*"], "alow_ports": [443]}}, "alow_ports"),
        ({"timeout": -1}, "timeout"),
    ],
)
def test_invalid_values_raise_value_error_naming_the_key(keys: dict, named: str) -> None:
    with pytest.raises(ValueError) as raised:
        ContainerExecutor(IMAGE, {"t": ["true"]}, engine="docker", **keys)
    assert isinstance(raised.value, errors.ConfigError)
    assert named in str(raised.value), str(raised.value)


def test_a_config_beyond_the_operators_floor_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    floor = tmp_path / "floor.toml"
    floor.write_text('allow = ["*.example.com"]\n')
    with pytest.raises(errors.ConfigError) as raised:
        ContainerExecutor(IMAGE, {"t": ["true"]}, engine="docker", network="egress",
                          egress={"allow": ["other.test"], "floor": str(floor)})
    assert 'allow "other.test"' in str(raised.value), str(raised.value)
    ContainerExecutor(IMAGE, {"t": ["true"]}, engine="docker", network="egress",
                      egress={"allow": ["api.example.com"], "floor": str(floor)})
    monkeypatch.setenv("AGENTGUARD_FLOOR", str(floor))
    with pytest.raises(errors.ConfigError, match="AGENTGUARD_FLOOR"):
        ContainerExecutor(IMAGE, {"t": ["true"]}, engine="docker", network="egress",
                          egress={"allow": ["other.test"]})


def test_a_bare_string_command_or_allowlist_is_refused() -> None:
    with pytest.raises(ValueError, match="commands"):
        ContainerExecutor(IMAGE, {"t": "rm -rf /"}, engine="docker")
    with pytest.raises(TypeError):
        ContainerExecutor(IMAGE, {"t": ["true"]}, engine="docker", memroy="1g")  # type: ignore[call-arg]


def test_engine_errors_raise_before_anything_runs(engine: str) -> None:
    absent = ContainerExecutor("localhost/agentguard-absent:1", {"t": ["true"]},
                               engine=engine, runtime="runsc")
    with pytest.raises(errors.EngineError) as raised:
        absent.run("t")
    assert raised.value.reason == "missing_image"
    assert "pull is `never`" in str(raised.value)
    unknown = ContainerExecutor(IMAGE, {"t": ["true"]}, engine=engine, runtime="runsc-absent")
    with pytest.raises(errors.EngineError) as raised:
        unknown.run("t")
    assert raised.value.reason == "unknown_runtime"
    assert absent("t")["reason"] == "missing_image"


def test_the_gil_is_released_while_a_command_runs(engine: str) -> None:
    slow = ContainerExecutor(IMAGE, {"nap": ["sleep", "2"]}, engine=engine, runtime="runsc")
    done: list = []
    runner = threading.Thread(target=lambda: done.append(slow.run("nap")))
    runner.start()
    # With the GIL held by the run, this loop could not advance until the run ended.
    spins = 0
    while runner.is_alive():
        spins += 1
    runner.join()
    assert done and done[0].ok
    assert spins > 10_000, spins


def test_per_command_values_writable_and_hidden_paths(engine: str, tmp_path: Path) -> None:
    # Issue 35: a command's own timeout and writable folder; hidden files read empty.
    ws = tmp_path / "ws"
    (ws / "build").mkdir(parents=True)
    (ws / ".env").write_text("TOKEN=leaked")
    for path in (ws, ws / "build"):
        os.chmod(path, 0o755)
        if os.getuid() == 0:
            os.chown(path, 1234, 2345)
    script = ("cat /workspace/.env; echo x > /workspace/build/out && echo wrote; "
              "(echo y > /workspace/other) 2>/dev/null || echo refused")
    tools = ContainerExecutor(
        IMAGE,
        {"look": {"argv": ["sh", "-c", script], "timeout": 60, "writable": ["build"]},
         "plain": ["true"]},
        workspace=str(ws), engine=engine, runtime="runsc", hidden=[".env"],
    )
    result = tools.run("look")
    assert result.exit_code == 0, result
    assert "TOKEN" not in result.stdout and "wrote" in result.stdout, result.stdout
    assert "refused" in result.stdout, result.stdout
    assert (ws / "build" / "out").read_text() == "x\n"
    assert not (ws / "other").exists()
    with pytest.raises(errors.ConfigError) as refused:
        ContainerExecutor(IMAGE, {"look": {"argv": ["true"], "timeout": 0}}, engine=engine)
    assert "commands.look.timeout" in str(refused.value)

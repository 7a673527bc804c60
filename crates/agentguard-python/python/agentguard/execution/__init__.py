"""Layers 1 and 2: allowlisted commands in hardened containers, and DNS-pinned fetches.

``ContainerExecutor`` takes the keys of the ``agentguard run`` config file as keyword
arguments and hands them to the same Rust loader, so a value the CLI refuses is refused here,
with the same message, at construction. ``NetworkExecutor`` is netpin's pinned GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from agentguard import _native
from agentguard.errors import CommandFailed, ConfigError

__all__ = ["ContainerExecutor", "NetworkExecutor", "RunResult", "Response"]

PathArg = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class RunResult:
    """How a run ended: the fields of ``agentguard run --json``.

    ``status`` is ``exited``, ``timed_out``, ``output_limit`` or ``killed``; ``exit_code`` is
    what the engine reported (137 after a kill), ``None`` if it reported none. ``stdout`` and ``stderr`` are decoded
    lossily (``stdout_bytes`` and ``stderr_bytes`` keep the bytes); ``egress`` counts the
    run's proxy decisions (``None`` for ``network="none"``); ``egress_refused`` lists what it
    refused, grouped (``{"target", "reason", "count"}``, most frequent first, at most 20) and
    ``egress_observed`` what an observe run let through; ``params`` are the checked values.
    """

    command: str
    exit_code: Optional[int]
    stdout: str
    stderr: str
    status: str
    timed_out: bool
    duration_ms: int
    container: str
    egress: Optional[Dict[str, int]]
    params: Dict[str, Any]
    truncated: bool
    stdout_bytes: bytes
    stderr_bytes: bytes
    egress_refused: List[Dict[str, Any]] = field(default_factory=list)
    egress_observed: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the command exited by itself with status 0."""
        return self.status == "exited" and self.exit_code == 0

    def to_dict(self) -> Dict[str, Any]:
        """The JSON-serializable fields (the byte fields left out)."""
        out = asdict(self)
        del out["stdout_bytes"], out["stderr_bytes"]
        return out


def _path(value: Optional[PathArg]) -> Optional[str]:
    return None if value is None else os.fspath(value)


def _hosts(key: str, value: Optional[Sequence[str]]) -> List[str]:
    # A bare string would be taken letter by letter: refuse it, never guess.
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        raise ConfigError(
            f"{key}: give a list of hosts, such as [{value!r}], not a string", "invalid_config"
        )
    return list(value)


def _config(image: str, commands: Mapping[str, Any], keys: Dict[str, Any]) -> str:
    config: Dict[str, Any] = {"image": image, "commands": dict(commands)}
    config.update((k, v) for k, v in keys.items() if v is not None)
    try:
        return json.dumps(config)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"ContainerExecutor: {e}", "invalid_config") from None


class ContainerExecutor:
    """Runs allowlisted commands in a hardened container (Docker or Podman, optionally gVisor).

    ``commands`` maps each NAME to its argv (``{"run_tests": ["python3", "-m", "pytest"]}``)
    or to a table (``{"argv": [...], "params": {...}, "network": "egress", ...}``): the agent
    picks a NAME, never a command line. Every keyword is the config key of the same name
    (docs/containers.md); relative paths are relative to the current folder. Invalid values
    raise ``ConfigError`` (a ``ValueError``) naming the key. Threads may share an executor.
    """

    def __init__(
        self,
        image: str,
        commands: Mapping[str, Any],
        *,
        workspace: Optional[PathArg] = None,
        workspace_mode: str = "ro",
        runtime: Optional[str] = None,
        engine: Optional[str] = None,
        network: str = "none",
        timeout: int = 300,
        check: bool = False,
        memory: Union[str, int] = "512m",
        cpus: Union[str, int, float] = "1",
        pids: int = 128,
        environment: Optional[Mapping[str, str]] = None,
        pull: str = "never",
        egress: Optional[Mapping[str, Any]] = None,
        audit: Optional[Union[PathArg, Mapping[str, str]]] = None,
        user: Optional[str] = None,
        tmpfs_size: Optional[Union[str, int]] = None,
        max_output_bytes: Optional[int] = None,
        require_digest: Optional[bool] = None,
        accept_weakened: Optional[Sequence[str]] = None,
        secrets: Optional[Mapping[str, Mapping[str, str]]] = None,
        routes: Optional[Mapping[str, Mapping[str, Any]]] = None,
        writable: Optional[Sequence[str]] = None,
        hidden: Optional[Sequence[str]] = None,
    ) -> None:
        if audit is not None and not isinstance(audit, Mapping):
            audit = {"path": os.fspath(audit)}
        keys: Dict[str, Any] = {
            "workspace": _path(workspace),
            "workspace_mode": workspace_mode,
            "runtime": runtime,
            "engine": engine,
            "network": network,
            "timeout": timeout,
            "check": check,
            "memory": memory,
            "cpus": cpus,
            "pids": pids,
            "environment": dict(environment) if environment is not None else None,
            "pull": pull,
            "egress": dict(egress) if egress is not None else None,
            "audit": dict(audit) if audit is not None else None,
            "user": user,
            "tmpfs_size": tmpfs_size,
            "max_output_bytes": max_output_bytes,
            "require_digest": require_digest,
            "accept_weakened": list(accept_weakened) if accept_weakened is not None else None,
            "secrets": {k: dict(v) for k, v in secrets.items()} if secrets else None,
            "routes": {k: dict(v) for k, v in routes.items()} if routes else None,
            "writable": list(writable) if writable is not None else None,
            "hidden": list(hidden) if hidden is not None else None,
        }
        self.image = image
        self.check = check
        self._native = _native.Executor(_config(image, commands, keys), os.getcwd())

    @property
    def commands(self) -> List[str]:
        """The allowlisted command names."""
        return list(self._native.commands())

    def run(self, name: str, /, *, observe: bool = False, **params: Any) -> RunResult:
        """Runs the allowlisted command ``name`` with its typed ``params``; waits for its end.

        Raises ``NotAllowed`` or ``InvalidArguments`` before anything starts,
        ``EngineError`` when the engine fails it, and with ``check=True``
        ``CommandFailed`` for a non-zero exit. Ctrl-C kills and removes the container, then
        raises ``KeyboardInterrupt``. The GIL is released while the command runs.

        ``observe=True`` is an observe run of a ``network="egress"`` command (docs/learn.md):
        its proxy lets through what the policy would refuse when every address is public, and
        records it as ``observed`` (``RunResult.egress_observed``); ``ConfigError`` for a
        ``network="none"`` command. A param cannot be named ``observe``.
        """
        if not isinstance(observe, bool):
            # Never widen by accident: a param named `observe` would land here.
            raise TypeError(
                f"observe must be True or False, not {type(observe).__name__}; "
                "a command's param cannot be named 'observe' in the Python API"
            )
        return self._run(name, params, None, observe)

    def _run(
        self,
        name: str,
        params: Mapping[str, Any],
        token: Optional[Any],
        observe: bool = False,
    ) -> RunResult:
        fields, failed = self._native.run(name, _params(params), token, observe)
        fields["params"] = json.loads(fields["params"])
        fields["timed_out"] = fields["status"] == "timed_out"
        if fields["egress"] is not None:
            egress = json.loads(fields["egress"])
            fields["egress"] = {"allowed": egress["allowed"], "denied": egress["denied"]}
            fields["egress_refused"] = egress["refused"]
            fields["egress_observed"] = egress.get("observed_targets", [])
        result = RunResult(**fields)
        if failed:
            raise CommandFailed(
                f"command {name!r} failed: {result.status} with exit code {result.exit_code}",
                result,
            )
        return result

    async def arun(self, name: str, /, **params: Any) -> RunResult:
        """``run`` for asyncio, on the loop's default executor; cancelling the task kills
        and removes the container before ``CancelledError`` propagates."""
        token = _native.CancelToken()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, functools.partial(self._run, name, params, token))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            token.cancel()
            with contextlib.suppress(Exception):
                await future
            raise

    def __call__(self, name: str, /, **params: Any) -> Dict[str, Any]:
        """Runs ``name`` and returns the JSON-serializable object an agent should see, exactly
        as ``agentguard mcp`` returns it: refusals and failures are results (``reason``,
        ``status``, ``exit_code``, output trimmed to head and tail), never raised."""
        return json.loads(self._native.tool(name, _params(params), None))  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        native = getattr(self, "_native", None)
        names = list(native.commands()) if native is not None else []
        return f"ContainerExecutor({self.image!r}, commands={names!r})"


def _params(params: Mapping[str, Any]) -> str:
    try:
        return json.dumps(dict(params))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"params: {e}", "invalid_arguments") from None


_CHARSET = re.compile(r"charset\s*=\s*\"?([A-Za-z0-9._-]+)", re.IGNORECASE)


@dataclass(frozen=True)
class Response:
    """A fetched response: ``status``, ``headers`` in order, ``body`` bytes (at most
    ``max_bytes``), the checked ``url`` and the address ``dialed``."""

    url: str
    status: int
    headers: List[Tuple[str, str]]
    body: bytes
    dialed: str

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (case-insensitive), or ``None``."""
        lower = name.lower()
        return next((v for k, v in self.headers if k.lower() == lower), None)

    def text(self, encoding: Optional[str] = None) -> str:
        """The body decoded with ``encoding``, the Content-Type's charset, or UTF-8;
        undecodable bytes are replaced."""
        if encoding is None:
            match = _CHARSET.search(self.header("content-type") or "")
            encoding = match.group(1) if match else "utf-8"
        try:
            return self.body.decode(encoding, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


class NetworkExecutor:
    """DNS-pinned HTTPS GETs: the host is resolved once, every address must be public (or in
    ``allow_cidrs``), exactly those addresses are dialed, and TLS verifies the host name.
    Redirects and environment proxies are never followed. Refusals raise ``Refused``."""

    def __init__(
        self,
        allow: Sequence[str],
        *,
        allow_ports: Sequence[int] = (443,),
        allow_cidrs: Optional[Sequence[str]] = None,
        nameservers: Optional[Sequence[str]] = None,
        ca_file: Optional[PathArg] = None,
        max_bytes: Optional[int] = None,
        audit: Optional[PathArg] = None,
        audit_key_env: Optional[str] = None,
    ) -> None:
        self._native = _native.Fetcher(
            _hosts("allow", allow),
            list(allow_ports),
            list(allow_cidrs or ()),
            list(nameservers or ()),
            _path(ca_file),
            max_bytes,
            _path(audit),
            audit_key_env,
        )

    def fetch(self, url: str) -> Response:
        """GETs the ``https://`` ``url``; the GIL is released while it is fetched."""
        got_url, status, headers, body, dialed = self._native.fetch(url)
        return Response(got_url, status, list(headers), body, dialed)

"""Layer 3: the allowlisting egress proxy, started in-process on a background thread.

The proxy accepts only ``CONNECT host:port`` for allowlisted hosts and ports, resolves each
host once, refuses non-public addresses, and tunnels to the checked address: the same Rust
proxy as ``agentguard egress-proxy``. Point tools at it with ``HTTPS_PROXY=http://HOST:PORT``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from agentguard import _native
from agentguard.execution import _hosts, _path

__all__ = ["EgressProxy"]

_log = logging.getLogger("agentguard.egress")

Decision = Dict[str, Any]


class EgressProxy:
    """An egress proxy; ``start()`` returns ``(host, port)``, ``stop()`` ends it; also a
    context manager (``with EgressProxy([...]) as proxy: proxy.address``).

    ``on_decision(event)`` is called once per audit event the proxy records (each CONNECT
    decision, each tunnel's close, each route request), with the event's fields: ``kind``,
    ``decision``, ``reason``, ``subject``, ``data``. It runs on its own thread, fed by a
    bounded queue of ``queue_size``: a slow callback never stalls a tunnel, and a full queue
    drops the event from the queue only (``dropped_decisions`` counts them; the audit log, when
    ``audit`` is given, still has every one). An exception in the callback is logged once and
    counted (``callback_errors``); the proxy goes on.
    """

    def __init__(
        self,
        allow: Sequence[str],
        *,
        allow_ports: Sequence[int] = (443,),
        allow_cidrs: Optional[Sequence[str]] = None,
        nameservers: Optional[Sequence[str]] = None,
        host: str = "127.0.0.1",
        port: int = 0,
        on_decision: Optional[Callable[[Decision], Any]] = None,
        audit: Optional[Union[str, "os.PathLike[str]"]] = None,
        audit_key_env: Optional[str] = None,
        queue_size: int = 1024,
        grace: float = 5.0,
    ) -> None:
        self._settings = (
            _hosts("allow", allow),
            list(allow_ports),
            list(allow_cidrs or ()),
            list(nameservers or ()),
            host,
            port,
            _path(audit),
            audit_key_env,
            queue_size,
        )
        self.on_decision = on_decision
        self.grace = grace
        self.callback_errors = 0
        self._last_dropped = 0
        self._native: Optional[Any] = None
        self._dispatcher: Optional[threading.Thread] = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> Tuple[str, int]:
        """Starts the proxy on a background thread; returns once it listens."""
        with self._lock:
            if self._native is not None:
                raise RuntimeError("EgressProxy is already started; stop() it first")
            self._stopped.clear()
            self._native = _native.Proxy(*self._settings)
            self._dispatcher = threading.Thread(
                target=self._dispatch, name="agentguard-decisions", daemon=True
            )
            self._dispatcher.start()
            return self._native.address()  # type: ignore[no-any-return]

    @property
    def address(self) -> Tuple[str, int]:
        """``(host, port)`` the running proxy listens on."""
        if self._native is None:
            raise RuntimeError("EgressProxy is not started")
        return self._native.address()  # type: ignore[no-any-return]

    @property
    def url(self) -> str:
        """``http://HOST:PORT``, the value for ``HTTPS_PROXY``."""
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def dropped_decisions(self) -> int:
        """Events the full queue could not take for ``on_decision``."""
        native = self._native
        return self._last_dropped if native is None else int(native.dropped())

    def stop(self) -> bool:
        """Stops accepting, lets tunnels finish for up to ``grace`` seconds, closes the rest,
        delivers the queued decisions, and syncs the audit log. True when every tunnel
        finished in time."""
        with self._lock:
            native, self._native = self._native, None
            if native is None:
                return True
            try:
                drained = bool(native.stop(self.grace))
            finally:
                self._stopped.set()
                if self._dispatcher is not None:
                    # A callback that never returns must not hang stop(): the thread is a
                    # daemon, and delivers the rest of the queue if the callback ever returns.
                    self._dispatcher.join(timeout=self.grace + 5.0)
                    if self._dispatcher.is_alive():
                        _log.warning(
                            "agentguard: on_decision is still running %.0f s after stop(); "
                            "the decisions still queued are delivered only if it returns",
                            self.grace + 5.0,
                        )
                    self._dispatcher = None
            dropped = int(native.dropped())
            if dropped and self.on_decision is not None:
                _log.warning(
                    "agentguard: %d decision(s) did not reach on_decision: its queue "
                    "(queue_size=%d) was full; the audit log, when kept, has every one",
                    dropped,
                    self._settings[-1],
                )
            self._last_dropped = dropped
            return drained

    def _dispatch(self) -> None:
        native = self._native
        assert native is not None
        while True:
            fields = native.next_decision(0.1)
            if fields is None:
                # After stop() the sender is gone: None means the queue is drained.
                if self._stopped.is_set():
                    return
                continue
            if self.on_decision is None:
                continue
            try:
                self.on_decision(json.loads(fields))
            except Exception:
                self.callback_errors += 1
                if self.callback_errors == 1:
                    _log.exception(
                        "agentguard: on_decision raised; the proxy goes on (later errors "
                        "are counted in callback_errors, not logged)"
                    )

    def __enter__(self) -> "EgressProxy":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"listening on {self.url}" if self._native is not None else "stopped"
        return f"EgressProxy({list(self._settings[0] or [])!r}, {state})"

"""The audit trail: verify a chained (optionally HMAC-signed) JSONL log, and read it.

The same streaming verifier as ``agentguard audit verify``: each line's hash is recomputed,
the sequence and the chain are checked, and with ``key`` every HMAC; it names the first bad
line. Deleting lines from the end cannot be detected by a chain alone: keep ``head`` elsewhere
and compare it later (docs/audit.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from agentguard import _native

__all__ = ["VerifyReport", "verify", "read"]

Key = Union[str, bytes]


@dataclass(frozen=True)
class VerifyReport:
    """What a verification established; true (``bool(report)``) only when every line verified.

    ``events`` counts the records that verified, ``head`` is the last one's hash,
    ``good_bytes`` the verified prefix; ``problem`` and ``problem_line`` name the first bad
    line, if any.
    """

    ok: bool
    events: int
    head: str
    next_seq: int
    signed: bool
    signatures_checked: bool
    good_bytes: int
    problem: Optional[str]
    problem_line: Optional[int]

    def __bool__(self) -> bool:
        return self.ok


def _key(key: Optional[Key]) -> Optional[bytes]:
    return key.encode() if isinstance(key, str) else key


def verify(path: Union[str, "os.PathLike[str]"], key: Optional[Key] = None) -> VerifyReport:
    """Verifies the log at ``path``; with ``key`` (the HMAC key) its signatures too."""
    events, head, next_seq, signed, checked, good, problem = _native.verify(
        os.fspath(path), _key(key)
    )
    line, message = problem if problem is not None else (None, None)
    return VerifyReport(
        problem is None, events, head, next_seq, signed, checked, good, message, line
    )


def read(path: Union[str, "os.PathLike[str]"], key: Optional[Key] = None) -> List[Dict[str, Any]]:
    """The records of the log at ``path``, each verified (``seq``, ``ts``, ``kind``,
    ``decision``, ``reason``, ``subject``, ``data``, ``prev``, ``hash``); raises
    ``AuditError`` at the first line that does not verify."""
    return [json.loads(line) for line in _native.read(os.fspath(path), _key(key))]

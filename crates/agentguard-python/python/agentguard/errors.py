"""The exceptions of AgentGuard, one class per outcome the CLI gives its own exit code.

Every exception carries ``reason``, the stable snake_case code the CLI prints and the audit
log records (``command_not_allowed``, ``invalid_arguments``, ``non_public_address``, ...).
Refusals are raised before anything starts: no container, no connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from agentguard.execution import RunResult

__all__ = [
    "AgentGuardError",
    "ConfigError",
    "NotAllowed",
    "InvalidArguments",
    "EngineError",
    "CommandFailed",
    "Cancelled",
    "Refused",
    "NetworkError",
    "AuditError",
]


class AgentGuardError(Exception):
    """The base class: ``str(error)`` says what was wrong and what to do."""

    reason: Optional[str]

    def __init__(self, message: str, reason: Optional[str] = None) -> None:
        super().__init__(message, reason)
        self.reason = reason

    def __str__(self) -> str:
        return str(self.args[0])


class ConfigError(AgentGuardError, ValueError):
    """A keyword argument was refused at construction (the CLI's exit 2); names the key."""


class NotAllowed(AgentGuardError):
    """The command name is not on the allowlist (the CLI's exit 123); nothing ran."""


class InvalidArguments(AgentGuardError, ValueError):
    """A param value was refused (the CLI's exit 2, ``invalid_arguments``); nothing ran."""


class EngineError(AgentGuardError):
    """The engine, the image, the runtime or this machine failed the run (the CLI's 125)."""


class CommandFailed(AgentGuardError):
    """With ``check=True``, the command did not exit 0; ``result`` is its ``RunResult``."""

    result: "RunResult"

    def __init__(self, message: str, result: "RunResult") -> None:
        super().__init__(message, "command_failed")
        self.args = (message, result)
        self.result = result


class Cancelled(AgentGuardError):
    """The run was cancelled (``arun``'s task): its container was killed and removed."""


class Refused(AgentGuardError):
    """A network refusal: ``reason`` is the code (``domain_not_allowed``,
    ``non_public_address``, ``port_not_allowed``, ...); nothing was sent."""


class NetworkError(AgentGuardError):
    """A fetch that was allowed but failed (a timeout, a TLS or HTTP error)."""


class AuditError(AgentGuardError):
    """An audit log that does not verify, read by ``agentguard.audit.read``."""

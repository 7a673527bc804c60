"""AgentGuard: isolation for what an AI agent's tool calls can do.

``agentguard.execution`` runs allowlisted commands in hardened containers
(``ContainerExecutor``) and fetches through DNS pinning (``NetworkExecutor``);
``agentguard.execution.egress`` is the allowlisting egress proxy (``EgressProxy``);
``agentguard.audit`` verifies the tamper-evident log; ``agentguard.errors`` holds the
exceptions. Every class is the same Rust code as the ``agentguard`` CLI.
"""

from agentguard._native import VERSION as __version__

__all__ = ["__version__"]

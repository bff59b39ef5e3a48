"""Key names of the Redis layout (documented in docs/backends/redis.md).

The Lua scripts derive the same names from the prefix (``lua/_lib.lua``); this module
builds those that Python reads directly.
"""

from __future__ import annotations

__all__ = ["Keys"]


class Keys:
    """Key builders for one prefix."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def job(self, job_id: str) -> str:
        """Hash of one job."""
        return f"{self.prefix}:j:{job_id}"

    def attempts(self, job_id: str) -> str:
        """List of one job's finished attempt records (JSON arrays), oldest first."""
        return f"{self.prefix}:a:{job_id}"

    def dead(self, dead_id: str) -> str:
        """Hash of one dead-letter entry."""
        return f"{self.prefix}:d:{dead_id}"

    def wake(self, queue: str) -> str:
        """Wake-up token list of one queue (bounded; BLPOPed by idle workers)."""
        return f"{self.prefix}:w:{queue}"

    def pattern(self) -> str:
        """A SCAN/KEYS pattern matching every key of this prefix."""
        return f"{self.prefix}:*"

"""Key names of the Redis layout (documented in docs/backends/redis.md).

The Lua scripts derive the same names from the prefix they are given (``lua/_lib.lua``);
this module builds those that Python reads directly. Each name is in a home
(``backends/redis/homes.py``): the storage's prefix unless another is given.
"""

from __future__ import annotations

__all__ = ["Keys"]


class Keys:
    """Key builders for one prefix."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def job(self, job_id: str, home: str | None = None) -> str:
        """Hash of one job."""
        return f"{home or self.prefix}:j:{job_id}"

    def attempts(self, job_id: str, home: str | None = None) -> str:
        """List of one job's finished attempt records (JSON arrays), oldest first."""
        return f"{home or self.prefix}:a:{job_id}"

    def dead(self, dead_id: str, home: str | None = None) -> str:
        """Hash of one dead-letter entry."""
        return f"{home or self.prefix}:d:{dead_id}"

    def wake(self, queue: str, home: str | None = None) -> str:
        """Wake-up token list of one queue (bounded; BLPOPed by idle workers)."""
        return f"{home or self.prefix}:w:{queue}"

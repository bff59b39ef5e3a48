"""The one source of time of the worker and the facade.

The worker and the :class:`~queue_core.Queue` facade receive a :class:`Clock`; tests
pass a manual clock (``queue_core.testing``) and advance it instead of sleeping. The
pure core never reads a clock: it takes ``now`` as an argument.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Wall-clock and monotonic time."""

    def now_ms(self) -> int:
        """Wall-clock time as epoch milliseconds (for timestamps and storage ``now``)."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds (for intervals and local deadlines; never goes back)."""
        ...


class SystemClock:
    """The real clock: :func:`time.time_ns` and :func:`time.monotonic`."""

    __slots__ = ()

    def now_ms(self) -> int:
        """Wall-clock time as epoch milliseconds."""
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (:func:`time.sleep`); a test clock advances instead."""
        time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"

"""The one source of time of the worker and the facade.

The worker (``Worker(..., clock=...)``, default: its queue's clock) and the
:class:`~queue_core.Queue` facade receive a :class:`Clock`; tests pass a manual clock
(``queue_core.testing``) and advance it instead of sleeping. The pure core never reads a
clock: it takes ``now`` as an argument.

A clock that also offers :class:`SupportsTimers` drives the worker's waits too (lease
renewal, the deadline and heartbeat watchdog, the reaper, the shutdown grace): the
worker then sleeps until the clock reaches a time instead of for a span of real time.
Without it (the :class:`SystemClock`) the worker sleeps on the event loop's timer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SupportsTimers", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Wall-clock and monotonic time."""

    def now_ms(self) -> int:
        """Wall-clock time as epoch milliseconds (for timestamps and storage ``now``)."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds (for intervals and local deadlines; never goes back)."""
        ...


@runtime_checkable
class SupportsTimers(Protocol):
    """A clock that calls back when its monotonic reading reaches a time."""

    def call_at(self, monotonic: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once :meth:`Clock.monotonic` reaches ``monotonic``.

        The callback may run in any thread (the one that moves the clock) and must not
        block. Returns a function that cancels the call (harmless after it ran).
        """
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

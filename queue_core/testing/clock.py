"""A manual clock for tests: time moves only when the test says so."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from queue_core.testing.fixtures import T0

__all__ = ["ManualClock"]


class ManualClock:
    """A clock that only moves when told to; thread-safe.

    It offers both readings the library uses: wall time in epoch milliseconds
    (:meth:`now_ms`, also available by calling the clock, so it can be passed as the
    ``clock`` of :class:`backends.memory.MemoryStorage`) and a monotonic reading in
    seconds (:meth:`monotonic`). :meth:`advance` moves both by the same amount.

    It also offers timers (:class:`queue_core.app.clock.SupportsTimers`), so a
    :class:`~queue_core.worker.Worker` given this clock sleeps until the test advances
    it: :meth:`advance` calls every timer that fell due, in due order, after moving.
    :meth:`pending_timers` shows what is waiting, so a test can wait until a service
    went to sleep before it moves time.

    Args:
        start_ms: the initial wall time, epoch milliseconds.
        monotonic_start: the initial monotonic reading, seconds.

    Example:
        >>> clock = ManualClock(start_ms=1_000)
        >>> clock.advance(1.5)
        >>> clock.now_ms(), clock.monotonic()
        (2500, 1.5)
    """

    def __init__(self, start_ms: int = T0, monotonic_start: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._ms = start_ms
        self._elapsed_ms = 0
        self._monotonic_start = monotonic_start
        self._timers: dict[int, tuple[float, Callable[[], None]]] = {}
        self._timer_ids = itertools.count()

    def now_ms(self) -> int:
        """The current wall time, epoch milliseconds."""
        with self._lock:
            return self._ms

    def __call__(self) -> int:
        return self.now_ms()

    def monotonic(self) -> float:
        """Seconds since an arbitrary origin; never goes backwards."""
        with self._lock:
            return self._monotonic_start + self._elapsed_ms / 1000.0

    def sleep(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` instead of waiting (what a wait on this clock
        does, e.g. :meth:`queue_core.JobHandle.result` polling on ``Queue(clock=...)``)."""
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (must not be negative)."""
        self.advance_ms(round(seconds * 1000))

    def advance_ms(self, ms: int) -> None:
        """Move the clock forward by ``ms`` milliseconds (must not be negative)."""
        if ms < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {ms} ms)")
        with self._lock:
            self._ms += ms
            self._elapsed_ms += ms
            now = self._monotonic_start + self._elapsed_ms / 1000.0
            due = sorted(
                ((at, key, cb) for key, (at, cb) in self._timers.items() if at <= now),
                key=lambda t: (t[0], t[1]),
            )
            for _, key, _ in due:
                del self._timers[key]
        for _, _, callback in due:
            callback()

    def call_at(self, monotonic: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once the monotonic reading reaches ``monotonic``.

        Due already: called at once, in this thread. Otherwise called by the
        :meth:`advance` that reaches it, in that thread. Returns a cancel function.
        """
        with self._lock:
            now = self._monotonic_start + self._elapsed_ms / 1000.0
            if monotonic > now:
                key = next(self._timer_ids)
                self._timers[key] = (monotonic, callback)
                return lambda: self._cancel(key)
        callback()
        return lambda: None

    def _cancel(self, key: int) -> None:
        with self._lock:
            self._timers.pop(key, None)

    def pending_timers(self) -> list[float]:
        """The monotonic times of the timers not yet due, earliest first."""
        with self._lock:
            return sorted(at for at, _ in self._timers.values())

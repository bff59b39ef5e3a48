"""One log line per storage outage, not one per failed call.

While storage is unreachable every service of a worker fails on each try (the claim
loop, the finisher, lease renewal, heartbeats, the reaper), each retrying with its own
backoff. :class:`Outage` turns that into two lines: a WARNING when the first call fails
with :class:`~queue_core.records.errors.StorageUnavailable` and an INFO when a call succeeds
again (how long it lasted, how many calls failed); the failures in between are DEBUG.
Other storage errors are not an outage and are logged by their caller every time.

An outage also pauses judging: while storage was unreachable no worker could renew a
lease or write a heartbeat, so right after it every attempt may *look* abandoned. The
reaper therefore reaps nothing while an outage lasts and for one hold period after it
ends (:meth:`Outage.hold_left`; the worker's hold is the longer of its lease and the
longest heartbeat of its tasks): by then every live worker has renewed its leases and
written its heartbeats, and only attempts whose workers are really gone still look so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from queue_core.app.clock import SystemClock
from queue_core.records.errors import StorageError, StorageUnavailable
from queue_core.worker.log import log

__all__ = ["Outage"]


class Outage:
    """The storage outage state of one worker, shared by its services (thread-safe)."""

    AFTERMATH = 10.0
    """Seconds after an outage during which a new failure counts as part of it: a pooled
    connection that died in the outage and was idle fails on its first use later."""

    __slots__ = ("_lock", "_since", "_failed", "_up_at", "_monotonic", "_quiet")

    def __init__(self, monotonic: Callable[[], float] | None = None) -> None:
        """``monotonic``: the worker's clock (default the system's)."""
        if monotonic is None:
            monotonic = SystemClock().monotonic
        self._lock = threading.Lock()
        self._monotonic = monotonic
        self._since: float | None = None
        self._failed = 0
        self._up_at: float | None = None
        self._quiet = False

    @property
    def down(self) -> bool:
        """Whether an outage is under way (a call failed and none succeeded since)."""
        return self._since is not None

    def failed(self, what: str, exc: StorageError) -> bool:
        """Note that ``what`` failed with ``exc``; whether it was an outage's failure
        (:class:`StorageUnavailable`: logged here, the first WARNING, then DEBUG). For
        any other error this returns ``False`` and the caller logs it."""
        if not isinstance(exc, StorageUnavailable):
            return False
        with self._lock:
            self._failed += 1
            first = self._since is None
            if first:
                now = self._monotonic()
                self._since = now
                up_at = self._up_at
                # a stale connection failing soon after an outage: the same outage
                self._quiet = up_at is not None and now - up_at < self.AFTERMATH
                first = not self._quiet
        if first:
            log.warning(
                "storage unavailable (%s failed: %s); retrying with backoff, further "
                "failures are logged at DEBUG until storage answers again",
                what,
                exc,
                extra={"event": {"event": "storage_down", "during": what}},
            )
        else:
            log.debug("%s failed during the storage outage (%s)", what, exc)
        return True

    def ok(self) -> None:
        """Note that a storage call succeeded: ends an outage (one INFO line)."""
        if self._since is None:
            return
        with self._lock:
            since, failed, quiet = self._since, self._failed, self._quiet
            self._since, self._failed, self._quiet = None, 0, False
        if since is None:
            return
        now = self._monotonic()
        self._up_at = now
        took = now - since
        if quiet:
            log.debug("storage answers again (%d calls failed after the outage)", failed)
            return
        log.info(
            "storage available again after %.1f s (%d calls failed meanwhile)",
            took,
            failed,
            extra={"event": {"event": "storage_up", "seconds": round(took, 3), "failed": failed}},
        )

    def hold_left(self, hold: float) -> float:
        """Seconds the reaper must still hold off: ``hold`` while an outage lasts, what
        is left of ``hold`` after the last one ended, else ``0``."""
        if self._since is not None:
            return hold
        up_at = self._up_at
        if up_at is None:
            return 0.0
        return max(0.0, up_at + hold - self._monotonic())

"""One log line per storage outage, not one per failed call.

While storage is unreachable every service of a worker fails on each try (the claim
loop, the finisher, lease renewal, heartbeats, the reaper), each retrying with its own
backoff. :class:`Outage` turns that into two lines: a WARNING when the first call fails
with :class:`~queue_core.errors.StorageUnavailable` and an INFO when a call succeeds
again (how long it lasted, how many calls failed); the failures in between are DEBUG.
Other storage errors are not an outage and are logged by their caller every time.
"""

from __future__ import annotations

import threading
import time

from queue_core.errors import StorageError, StorageUnavailable
from queue_core.worker.log import log

__all__ = ["Outage"]


class Outage:
    """The storage outage state of one worker, shared by its services (thread-safe)."""

    __slots__ = ("_lock", "_since", "_failed")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._failed = 0

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
                self._since = time.monotonic()
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
            since, failed = self._since, self._failed
            self._since, self._failed = None, 0
        if since is None:
            return
        took = time.monotonic() - since
        log.info(
            "storage available again after %.1f s (%d calls failed meanwhile)",
            took,
            failed,
            extra={"event": {"event": "storage_up", "seconds": round(took, 3), "failed": failed}},
        )

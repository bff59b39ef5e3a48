"""Writing ``ctx.progress`` reports: at most one write per attempt per second, the latest
always kept (SPEC §13).

A body's report only lands in :class:`ProgressWriter` (a dict and a notify, from any
thread or the event loop, never a storage call); the writer's own daemon thread writes
each attempt's latest report when :func:`~queue_core.rules.control.progress_due_at` says it
may, so a report that comes too soon after the last write waits for the next second
instead of being dropped. The attempt's end carries the latest report itself
(``AttemptEnd.progress``, stored by ``finish`` in the same step), so nothing is lost when
the body ends between two writes. The decision (:meth:`ProgressBook.take_due`) is a plain
function of the reports and ``now``, tested without a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from queue_core.app.clock import SystemClock
from queue_core.records.control import ProgressUpdate
from queue_core.records.errors import StorageError
from queue_core.records.jobs import LeaseRef
from queue_core.rules.control import progress_due_at
from queue_core.storage.control import SupportsProgress
from queue_core.storage.protocol import Storage
from queue_core.worker.log import log

__all__ = ["ProgressBook", "ProgressWriter"]

_SYSTEM = SystemClock()


def _system_ms() -> int:
    """The system's monotonic clock in milliseconds."""
    return int(_SYSTEM.monotonic() * 1000)


class ProgressBook:
    """Each attempt's waiting report and the time of its last write (no lock, no clock)."""

    __slots__ = ("waiting", "written")

    def __init__(self) -> None:
        self.waiting: dict[LeaseRef, ProgressUpdate] = {}
        self.written: dict[LeaseRef, int] = {}

    def take_due(self, now_ms: int) -> tuple[list[tuple[LeaseRef, ProgressUpdate]], int | None]:
        """The reports to write at ``now_ms`` (each marked written then), and when the
        next waiting one falls due (``None``: nothing waits)."""
        due: list[tuple[LeaseRef, ProgressUpdate]] = []
        later: int | None = None
        for ref, update in list(self.waiting.items()):
            at = progress_due_at(self.written.get(ref))
            if at <= now_ms:
                due.append((ref, update))
                del self.waiting[ref]
                self.written[ref] = now_ms
            elif later is None or at < later:
                later = at
        return due, later

    def forget(self, ref: LeaseRef) -> None:
        """The attempt ended: its end carries the latest report."""
        self.waiting.pop(ref, None)
        self.written.pop(ref, None)


class ProgressWriter:
    """Writes the progress reports of one worker's attempts (a thread started on the first
    report; a storage without ``SupportsProgress`` gets none).

    Args:
        storage: the worker's storage.
        monotonic_ms: the clock the throttle reads, milliseconds (default: the system's
            monotonic clock; the worker passes its pacing clock, the same one: the
            throttle paces storage writes and its thread waits in real time).
    """

    def __init__(self, storage: Storage, monotonic_ms: Callable[[], int] | None = None) -> None:
        self._storage = storage if isinstance(storage, SupportsProgress) else None
        self._now = monotonic_ms or _system_ms
        self._book = ProgressBook()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._failed = False

    def report(self, ref: LeaseRef, update: ProgressUpdate) -> None:
        """Keep ``update`` as ``ref``'s latest report; it is written when due."""
        if self._storage is None:
            return
        with self._cond:
            if self._closed:
                return
            self._book.waiting[ref] = update
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="queue-core-progress", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def forget(self, ref: LeaseRef) -> None:
        """``ref``'s attempt ended (its end carries the latest report)."""
        if self._storage is None:
            return
        with self._cond:
            self._book.forget(ref)

    def close(self) -> None:
        """Stop the thread (waiting reports are dropped: each attempt's end has its own)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        storage = self._storage
        assert storage is not None
        while True:
            with self._cond:
                due, later = self._book.take_due(self._now())
                while not due and not self._closed:
                    wait = None if later is None else max(0.0, (later - self._now()) / 1000)
                    self._cond.wait(wait)
                    due, later = self._book.take_due(self._now())
                if self._closed:
                    return
            for ref, update in due:
                try:
                    storage.set_progress(ref, update)
                except StorageError as exc:  # the end still carries the latest report
                    if not self._failed:
                        log.warning("progress of job %s not written (%s)", ref.job_id, exc)
                    self._failed = True
                else:
                    self._failed = False

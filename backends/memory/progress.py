"""Progress of ``memory://`` (``SupportsProgress``): each job's latest report, fenced by
its attempt, kept with the job and pruned with it."""

from __future__ import annotations

from backends.memory.store import MemoryStore
from queue_core.records.control import Progress, ProgressUpdate
from queue_core.records.jobs import LeaseRef, dt_from_ms

__all__ = ["MemoryProgress"]


class MemoryProgress:
    """:class:`~queue_core.storage.control.SupportsProgress`; ``finish`` calls
    :meth:`record` for an end that carries progress."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.latest: dict[str, Progress] = {}

    def set_progress(
        self, ref: LeaseRef, update: ProgressUpdate, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.control.SupportsProgress.set_progress`."""
        with self.store.cond:
            if self.store.current(ref) is None:
                return False
            self.record(ref.job_id, update, self.store.now(now))
            return True

    def get_progress(self, job_id: str) -> Progress | None:
        """See :meth:`queue_core.storage.control.SupportsProgress.get_progress`."""
        with self.store.cond:
            return self.latest.get(job_id)

    def record(self, job_id: str, update: ProgressUpdate, t: int) -> None:
        """Store ``update`` as ``job_id``'s progress at ``t`` (lock held)."""
        at = dt_from_ms(t)
        assert at is not None
        self.latest[job_id] = Progress(fraction=update.fraction, message=update.message, at=at)

    def forget(self, job_id: str) -> None:
        """A pruned job's progress goes with it (lock held)."""
        self.latest.pop(job_id, None)

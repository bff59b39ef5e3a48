"""Periodic ticks of ``memory://`` (:class:`~queue_core.storage.abilities.SupportsSchedules`):
the last tick per schedule, checked and set under the store's lock together with the
tick's enqueue."""

from __future__ import annotations

from backends.memory.control import MemoryControl
from backends.memory.store import MemoryStore
from queue_core.records.errors import StorageError
from queue_core.records.jobs import JobState, NewJob

__all__ = ["MemorySchedules"]


class MemorySchedules:
    """``enqueue_tick`` and ``schedule_ticks`` (built on first use)."""

    def __init__(self, store: MemoryStore, control: MemoryControl) -> None:
        self.store = store
        self.control = control
        """A tick's job is stored as any enqueued job (supersede, debounce)."""
        self.ticks: dict[str, int] = {}
        """Schedule name -> its last tick (epoch ms)."""

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.enqueue_tick`."""
        store = self.store
        with store.cond:
            last = self.ticks.get(schedule)
            if last is not None and tick_ms <= last:
                return False
            if job.id in store.jobs:
                raise StorageError(f"job id {job.id!r} already exists")
            if self.control.store_job(job, store.now(now)).state is JobState.QUEUED:
                store.cond.notify_all()
            self.ticks[schedule] = tick_ms
            return True

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.schedule_ticks`."""
        with self.store.cond:
            return dict(self.ticks)

"""Periodic ticks in memory (:class:`~queue_core.schedules.SupportsSchedules`): the last
tick per schedule, checked and set under the storage's lock together with the enqueue."""

from __future__ import annotations

import threading
from typing import Any

from queue_core.errors import StorageError
from queue_core.model import JobState, NewJob

__all__ = ["MemorySchedules"]


class MemorySchedules:
    """Mixed into :class:`~backends.memory.MemoryStorage`, whose lock (``_cond``) and
    job insertion (``_now``, ``_add_job``, ``_jobs``) it uses."""

    _cond: threading.Condition

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.schedules.SupportsSchedules.enqueue_tick`."""
        me: Any = self
        with self._cond:
            ticks: dict[str, int] = self.__dict__.setdefault("_ticks", {})
            last = ticks.get(schedule)
            if last is not None and tick_ms <= last:
                return False
            if job.id in me._jobs:
                raise StorageError(f"job id {job.id!r} already exists")
            if me._add_job(job, me._now(now)).state is JobState.QUEUED:
                self._cond.notify_all()
            ticks[schedule] = tick_ms
            return True

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.schedules.SupportsSchedules.schedule_ticks`."""
        with self._cond:
            return dict(self.__dict__.get("_ticks", {}))

"""Throughput counts of ``memory://`` (mixed into :class:`backends.memory.MemoryStorage`;
see :mod:`queue_core.throughput`): read from the jobs it keeps, like the SQL backend."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from queue_core.model import JobState
from queue_core.throughput import (
    ENQUEUED,
    THROUGHPUT_RESOLUTION_MS,
    ThroughputCount,
    check_bucket_ms,
    fold_counts,
)

if TYPE_CHECKING:
    from backends._memory_records import _Job

__all__ = ["MemoryThroughput"]

_OPEN = (JobState.QUEUED, JobState.RUNNING)


class MemoryThroughput:
    """:class:`~queue_core.throughput.SupportsThroughput` under the storage's one lock."""

    _cond: threading.Condition
    _jobs: dict[str, _Job]

    if TYPE_CHECKING:  # provided by MemoryIndex

        def _now(self, now: int | None) -> int: ...

    def throughput(
        self,
        since_ms: int,
        bucket_ms: int = THROUGHPUT_RESOLUTION_MS,
        *,
        queues: Sequence[str] | None = None,
        now: int | None = None,
    ) -> list[ThroughputCount]:
        """See :meth:`queue_core.throughput.SupportsThroughput.throughput`."""
        check_bucket_ms(bucket_ms)
        with self._cond:
            t = self._now(now)
            return fold_counts(self._events(), since_ms, t, bucket_ms, queues)

    def _events(self) -> Iterator[tuple[str, int, str, int]]:
        for job in self._jobs.values():
            yield job.spec.queue, job.enqueued_at, ENQUEUED, 1
            if job.state not in _OPEN and job.finished_at is not None:
                yield job.spec.queue, job.finished_at, job.state.value, 1

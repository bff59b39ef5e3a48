"""Throughput counts of ``memory://`` (see :mod:`queue_core.rules.throughput`): folded from
the jobs it keeps, like the SQL backend (built on first use)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from backends.memory.store import MemoryStore
from queue_core.records.jobs import JobState
from queue_core.rules.throughput import (
    ENQUEUED,
    THROUGHPUT_RESOLUTION_MS,
    ThroughputCount,
    check_bucket_ms,
    fold_counts,
)

__all__ = ["MemoryThroughput"]

_OPEN = (JobState.QUEUED, JobState.RUNNING)


class MemoryThroughput:
    """:class:`~queue_core.storage.abilities.SupportsThroughput` under the store's lock."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def throughput(
        self,
        since_ms: int,
        bucket_ms: int = THROUGHPUT_RESOLUTION_MS,
        *,
        queues: Sequence[str] | None = None,
        now: int | None = None,
    ) -> list[ThroughputCount]:
        """See :meth:`queue_core.storage.abilities.SupportsThroughput.throughput`."""
        check_bucket_ms(bucket_ms)
        with self.store.cond:
            t = self.store.now(now)
            return fold_counts(self._events(), since_ms, t, bucket_ms, queues)

    def _events(self) -> Iterator[tuple[str, int, str, int]]:
        for job in self.store.jobs.values():
            yield job.spec.queue, job.enqueued_at, ENQUEUED, 1
            if job.state not in _OPEN and job.finished_at is not None:
                yield job.spec.queue, job.finished_at, job.state.value, 1

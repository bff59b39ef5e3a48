"""Throughput counts of the SQL backend (see :mod:`queue_core.rules.throughput`), read from
the job rows: ``enqueued_at`` through ``ix_qc_jobs_enqueued`` (schema version 9) and
``finished_at`` of finished jobs through ``ix_qc_jobs_finished``. Nothing is written on
enqueue, claim or finish, so the drain pays only the one index entry per enqueued job."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from backends.sql.store import Store
from queue_core.rules.throughput import (
    ENQUEUED,
    THROUGHPUT_RESOLUTION_MS,
    ThroughputCount,
    bucket_start,
    check_bucket_ms,
    fold_counts,
)

__all__ = ["Throughput"]


def _events(enqueued: list[Any], finished: list[Any]) -> Iterator[tuple[str, int, str, int]]:
    for r in enqueued:
        yield r["queue"], int(r["minute"]), ENQUEUED, int(r["n"])
    for r in finished:
        yield r["queue"], int(r["minute"]), r["state"], int(r["n"])


class Throughput:
    """:class:`~queue_core.storage.abilities.SupportsThroughput`: two grouped index reads."""

    def __init__(self, store: Store) -> None:
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
        with self.store.stmt() as cur:
            t = self.store.resolve_now(cur, now)
            params = {"first": bucket_start(since_ms, bucket_ms), "now": t}
            enqueued = cur.execute(self.store.q["throughput_enqueued"], params).fetchall()
            finished = cur.execute(self.store.q["throughput_finished"], params).fetchall()
        return fold_counts(_events(enqueued, finished), since_ms, t, bucket_ms, queues)

"""Throughput over the last hour: jobs enqueued and jobs finished per time bucket.

:class:`SupportsThroughput` is the optional storage ability behind the dashboard's
throughput sparklines and the ``queue_core_jobs_enqueued_total`` /
``queue_core_jobs_finished_total`` counters of :mod:`contrib.metrics`. Every process
that can reach the storage reads the same numbers, so they are true across workers and
producers.

What is counted, per queue and bucket (``kind`` of a :class:`ThroughputCount`):

* ``"enqueued"``: jobs stored by :meth:`~queue_core.storage.protocol.Storage.enqueue`, in the
  bucket of the enqueue's ``now``;
* a finished state (``"succeeded"``, ``"dead"``, ``"cancelled"``, ``"timed_out"``,
  ``"skipped"``): jobs that reached it, in the bucket of their ``finished_at``. A retry
  is not a finish: a job counts once, when it ends for good.

Buckets are aligned to the epoch (a bucket starts at a multiple of its width). Storage
keeps what it needs for at least :data:`THROUGHPUT_WINDOW_MS` (one hour) -- counter
backends (Redis, SQS+DynamoDB) drop older minutes; backends that read job rows (memory,
SQLite, PostgreSQL) answer from the jobs they still keep, so a retention shorter than
the window (``?retention=``) also shortens what they can count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from queue_core.records.base import Record
from queue_core.records.errors import ConfigError

__all__ = [
    "ENQUEUED",
    "FINISHED_KINDS",
    "THROUGHPUT_RESOLUTION_MS",
    "THROUGHPUT_WINDOW_MS",
    "ThroughputCount",
    "bucket_start",
    "check_bucket_ms",
    "fold_counts",
]

THROUGHPUT_RESOLUTION_MS: Final = 60_000
"""The finest bucket width (one minute); ``bucket_ms`` must be a multiple of it."""
THROUGHPUT_WINDOW_MS: Final = 3_600_000
"""How far back every backend can answer (one hour)."""
ENQUEUED: Final = "enqueued"
"""The ``kind`` of enqueue counts."""
FINISHED_KINDS: Final = ("succeeded", "dead", "cancelled", "timed_out", "skipped")
"""The ``kind`` values of finish counts: the final job states."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ThroughputCount(Record):
    """``count`` jobs of ``queue`` were enqueued (``kind == "enqueued"``) or finished in
    state ``kind`` during the bucket starting at ``bucket`` (epoch ms)."""

    queue: str
    bucket: int
    kind: str
    count: int


def check_bucket_ms(bucket_ms: int) -> int:
    """``bucket_ms`` if it is a positive multiple of :data:`THROUGHPUT_RESOLUTION_MS`.

    Raises:
        ConfigError: ``invalid_option`` naming the value and what is accepted.
    """
    if (
        isinstance(bucket_ms, bool)
        or not isinstance(bucket_ms, int)
        or bucket_ms <= 0
        or bucket_ms % THROUGHPUT_RESOLUTION_MS
    ):
        raise ConfigError(
            f"bucket_ms must be a positive multiple of {THROUGHPUT_RESOLUTION_MS} "
            f"(one minute), got {bucket_ms!r}",
            code="invalid_option",
            field="bucket_ms",
            value=bucket_ms,
        )
    return bucket_ms


def bucket_start(t: int, bucket_ms: int) -> int:
    """The start of the epoch-aligned bucket of width ``bucket_ms`` holding ``t``."""
    return t - t % bucket_ms


def fold_counts(
    events: Iterable[tuple[str, int, str, int]],
    since_ms: int,
    now: int,
    bucket_ms: int,
    queues: Sequence[str] | None = None,
) -> list[ThroughputCount]:
    """Sum ``(queue, t, kind, n)`` events into buckets of ``bucket_ms``.

    Keeps events with ``bucket_start(since_ms) <= t <= now`` (and ``queue in queues``
    when given); drops zero sums. The one place every backend's answer is shaped:
    sorted by queue, bucket, kind.
    """
    first = bucket_start(since_ms, bucket_ms)
    wanted = None if queues is None else set(queues)
    sums: Counter[tuple[str, int, str]] = Counter()
    for queue, t, kind, n in events:
        if first <= t <= now and (wanted is None or queue in wanted):
            sums[(queue, bucket_start(t, bucket_ms), kind)] += n
    return [ThroughputCount(q, b, k, n) for (q, b, k), n in sorted(sums.items()) if n]

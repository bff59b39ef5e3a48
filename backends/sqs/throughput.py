"""Throughput counts of ``sqs://`` (see :mod:`queue_core.rules.throughput`), read from the job
items like the SQL backend: nothing is written on enqueue, claim or finish (0 extra
requests per job, no hot counter item for concurrent finish transactions to conflict
on). A read is one paged Query of the ``due`` index's finished partition (``P F``,
``dx`` = ``finished_at``) over the window, plus one paged Query of the ``all`` index
filtered on ``enq`` (the pages :meth:`~backends.sqs.admin.Admin.stats` reads too),
both projecting three attributes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from backends.sqs.codec import Item, vals
from backends.sqs.errors import translate
from backends.sqs.store import Store
from queue_core.rules.throughput import (
    ENQUEUED,
    THROUGHPUT_RESOLUTION_MS,
    ThroughputCount,
    bucket_start,
    check_bucket_ms,
    fold_counts,
)

__all__ = ["Throughput"]


def _events(enqueued: list[Item], finished: list[Item]) -> Iterator[tuple[str, int, str, int]]:
    for it in enqueued:
        yield it["q"], int(it["enq"]), ENQUEUED, 1
    for it in finished:
        yield it["q"], int(it["dx"]), it["st"], 1


class Throughput:
    """:class:`~queue_core.storage.abilities.SupportsThroughput` from two index Queries
    (built on first use)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db
        self.keys = store.keys

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
        t = self.store.now(now)
        first = bucket_start(since_ms, bucket_ms)
        with translate("throughput"):
            finished = self.db.query(
                IndexName="due",
                KeyConditionExpression="dp = :p AND dx BETWEEN :a AND :b",
                ProjectionExpression="q, st, dx",
                ExpressionAttributeValues=vals(p=self.keys.finished, a=first, b=t),
            )
            enqueued = self.db.query(
                IndexName="all",
                KeyConditionExpression="ap = :ap",
                # a mistyped enq (a corrupt record) is left out, as DynamoDB leaves it;
                # the type check first, so moto does not fail the page over it
                FilterExpression="attribute_type(enq, :n) AND enq BETWEEN :a AND :b",
                ProjectionExpression="q, enq",
                ExpressionAttributeValues=vals(ap=self.keys.p, a=first, b=t, n="N"),
            )
        return fold_counts(_events(enqueued, finished), since_ms, t, bucket_ms, queues)

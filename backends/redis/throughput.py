"""Throughput counts of ``redis://`` (see :mod:`queue_core.rules.throughput`).

The scripts count as they go (``tp_add`` in ``lua/_lib.lua``): one hash per minute,
``<prefix>:tp:<epoch minute>``, field ``<kind>|<queue>``, incremented by ``enqueue.lua``
(``enqueued``) and by every move of a job to a final state (``terminal()``: finish, reap,
cancel, flows). A batch script writes each field once (``HINCRBY``) and the key's TTL
once (``PEXPIRE`` :data:`TTL_MS`, the one-hour window + 2 minutes), so a drain pays about
two commands per batch. The keys carry the prefix of the home the script runs in, so on a
Redis Cluster each home counts its own jobs. :meth:`RedisThroughput.throughput` reads the
minutes it needs with one pipeline of ``HGETALL`` (on a cluster, over every home) and adds
them up. Built on first use (``RedisStorage.throughput``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from backends.redis.errors import translate_errors
from backends.redis.store import RedisStore
from queue_core.rules.throughput import (
    THROUGHPUT_RESOLUTION_MS,
    THROUGHPUT_WINDOW_MS,
    ThroughputCount,
    bucket_start,
    check_bucket_ms,
    fold_counts,
)

__all__ = ["TTL_MS", "RedisThroughput"]

TTL_MS: Final = THROUGHPUT_WINDOW_MS + 2 * THROUGHPUT_RESOLUTION_MS
"""How long a minute's hash lives after its last write (``TP_TTL`` in ``_lib.lua``)."""


def _events(
    minutes: list[int], hashes: list[dict[bytes, bytes]]
) -> Iterator[tuple[str, int, str, int]]:
    for minute, fields in zip(minutes, hashes, strict=True):
        for field, n in fields.items():
            kind, _, queue = field.decode().partition("|")
            yield queue, minute * THROUGHPUT_RESOLUTION_MS, kind, int(n)


class RedisThroughput:
    """:class:`~queue_core.storage.abilities.SupportsThroughput` from the per-minute hashes."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    def throughput(
        self, since_ms: int, bucket_ms: int, queues: Sequence[str] | None, now: int | None
    ) -> list[ThroughputCount]:
        """``SupportsThroughput.throughput`` (``now`` omitted: the server's clock)."""
        check_bucket_ms(bucket_ms)
        t = self.store.now(now)
        last = t // THROUGHPUT_RESOLUTION_MS
        first = max(bucket_start(since_ms, bucket_ms), t - TTL_MS) // THROUGHPUT_RESOLUTION_MS
        minutes = list(range(first, last + 1))
        if not minutes:
            return []
        homes = self.store.homes.all()
        with translate_errors("throughput"):
            pipe = self.store.client.pipeline(transaction=False)
            for home in homes:
                for m in minutes:
                    pipe.hgetall(self.store.key("tp", str(m), home))
            hashes: list[dict[bytes, bytes]] = pipe.execute()
        return fold_counts(_events(minutes * len(homes), hashes), since_ms, t, bucket_ms, queues)

"""Throughput counts of ``redis://`` (see :mod:`queue_core.throughput`).

The scripts count as they go (``tp_add`` in ``lua/_lib.lua``): one hash per minute,
``<prefix>:tp:<epoch minute>``, field ``<kind>|<queue>``, incremented by ``enqueue.lua``
(``enqueued``) and by every move of a job to a final state (``terminal()``: finish, reap,
cancel, flows). A batch script writes each field once (``HINCRBY``) and the key's TTL
once (``PEXPIRE`` :data:`TTL_MS`, the one-hour window + 2 minutes), so a drain pays about
two commands per batch. The keys carry the storage's prefix, so on a Redis Cluster they
live in its hash slot. :meth:`RedisThroughput.throughput` reads the minutes it needs
with one pipeline of ``HGETALL``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from backends.redis.errors import translate_errors
from queue_core.throughput import (
    THROUGHPUT_RESOLUTION_MS,
    THROUGHPUT_WINDOW_MS,
    ThroughputCount,
    bucket_start,
    check_bucket_ms,
    fold_counts,
)

if TYPE_CHECKING:
    from backends.redis.keys import Keys

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
    """:class:`~queue_core.throughput.SupportsThroughput` from the per-minute hashes."""

    _r: Any
    keys: Keys

    if TYPE_CHECKING:  # provided by RedisFlows

        def _flow_now(self, now: int | None) -> int: ...

    def throughput(
        self,
        since_ms: int,
        bucket_ms: int = THROUGHPUT_RESOLUTION_MS,
        *,
        queues: Sequence[str] | None = None,
        now: int | None = None,
    ) -> list[ThroughputCount]:
        """See :meth:`queue_core.throughput.SupportsThroughput.throughput` (``now``
        omitted: the server's clock)."""
        check_bucket_ms(bucket_ms)
        t = self._flow_now(now)
        last = t // THROUGHPUT_RESOLUTION_MS
        first = max(bucket_start(since_ms, bucket_ms), t - TTL_MS) // THROUGHPUT_RESOLUTION_MS
        minutes = list(range(first, last + 1))
        if not minutes:
            return []
        with translate_errors("throughput"):
            pipe = self._r.pipeline(transaction=False)
            for m in minutes:
                pipe.hgetall(f"{self.keys.prefix}:tp:{m}")
            hashes: list[dict[bytes, bytes]] = pipe.execute()
        return fold_counts(_events(minutes, hashes), since_ms, t, bucket_ms, queues)

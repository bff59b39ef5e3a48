"""Unique jobs, rate limits and concurrency limits of the Redis backend (standalone and
Cluster).

Each is applied inside the Lua scripts of the operations it guards, so each check and its
write are one atomic step on the server, judged by the scripts' clock (Redis ``TIME``
unless the caller passes ``now``):

* ``enqueue.lua`` looks up ``P:u:<key>`` (the last job stored with a unique key) and the
  holder's state, and stores a job only when its key is free
  (:func:`queue_core.rules.limits.unique_holds`, mirrored in Lua); ``prune.lua`` deletes
  the key with the last job it names. ``enqueue_unique`` is
  :meth:`backends.redis.enqueue.RedisEnqueue.enqueue_unique`.
* ``claim.lua`` claims a rate-limited job only while ``P:rt:<key>``, a zset of the key's
  kept times (each granted claim's ``start_by``: its time plus
  :data:`~queue_core.rules.limits.RATE_START_MS`) trimmed to the window and expiring
  with it, holds fewer than the limit (:func:`queue_core.rules.limits.rate_grant`,
  mirrored in Lua), and returns ``start_by`` with the job; a job over the rate stays in
  its ready set. :class:`RedisLimits` reads that usage.
* ``enqueue.lua`` skips a ``skip`` job whose concurrency key ``P:ca:<key>`` is at its
  limit; ``claim.lua`` parks a ``queue`` job in ``P:cw:<key>`` while ``P:cr:<key>`` is.

On a cluster the jobs with such keys, and the keys, live in the storage's shared home
(``{prefix}``, ``backends/redis/homes.py``), so the scripts stay in one slot.
"""

from __future__ import annotations

from backends.redis.errors import translate_errors
from backends.redis.store import RedisStore

__all__ = ["RedisLimits"]


class RedisLimits:
    """:class:`~queue_core.storage.abilities.SupportsRateLimits` of one store."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    def rate_usage(self, rate_key: str, window_ms: int, now: int | None) -> int:
        """``SupportsRateLimits.rate_usage``: kept times of ``rate_key`` after ``now -
        window`` (a kept time is a claim's ``start_by``, so it may lie after ``now``)."""
        t = self.store.now(now)
        with translate_errors("rate usage"):
            key = self.store.key("rt", rate_key)
            return int(self.store.client.zcount(key, f"({t - window_ms}", "+inf"))

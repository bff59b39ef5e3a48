"""Periodic ticks on Redis (:class:`~queue_core.storage.abilities.SupportsSchedules`).

The hash ``P:schedules`` holds the last tick per schedule. ``schedule_tick.lua`` (run
as one script with ``enqueue.lua``) checks and moves it and enqueues the tick's job
atomically; on a cluster the hash is in the storage's shared home, and so is the tick's job
(its queue is marked as having jobs there, ``backends/redis/homes.py``). Built on first use
(``RedisStorage.schedules``).
"""

from __future__ import annotations

from backends.redis.errors import translate_errors
from backends.redis.records import enqueue_args
from backends.redis.scripts import cluster_text, lua_text
from backends.redis.store import RedisStore
from queue_core.records.errors import StorageError
from queue_core.records.jobs import NewJob

__all__ = ["RedisSchedules"]


class RedisSchedules:
    """The schedule operations of one store."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        text = "\n".join(lua_text(n, store.cluster) for n in ("_lib", "schedule_tick", "enqueue"))
        self._tick = store.register(cluster_text(text) if store.cluster else text)

    def enqueue_tick(self, schedule: str, tick_ms: int, job: NewJob, now: int | None) -> bool:
        """``SupportsSchedules.enqueue_tick``."""
        homes = self.store.homes
        homes.prepare([(homes.shared, job.queue)])
        made = homes.reserve([(job.id, homes.shared)])
        args = self.store.args(now)
        args += (schedule, tick_ms, *enqueue_args(job))
        try:
            with translate_errors("enqueue_tick"):
                res = self.store.run(self._tick, args)
        except BaseException:
            homes.drop(made)
            raise
        if res and res[0] in (b"tick", b"dup"):
            homes.drop(made)
        if res and res[0] == b"tick":
            return False
        if res and res[0] == b"dup":
            raise StorageError(f"job id {res[1].decode()!r} already exists")
        return True

    def schedule_ticks(self) -> dict[str, int]:
        """``SupportsSchedules.schedule_ticks``."""
        self.store.args(None)  # refused once closed
        with translate_errors("schedule_ticks"):
            raw = self.store.client.hgetall(f"{self.store.key_prefix}:schedules")
        return {k.decode(): int(v) for k, v in raw.items()}

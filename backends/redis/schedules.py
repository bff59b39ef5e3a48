"""Periodic ticks on Redis (:class:`~queue_core.schedules.SupportsSchedules`).

The hash ``P:schedules`` holds the last tick per schedule. ``schedule_tick.lua`` (run
as one script with ``enqueue.lua``) checks and moves it and enqueues the tick's job
atomically; on a cluster the hash shares the prefix's hash tag, so it lives in the slot
of every other key of the storage.
"""

from __future__ import annotations

from typing import Any

from backends.redis.errors import translate_errors
from backends.redis.limits import enqueue_args
from backends.redis.scripts import lua_text
from queue_core.errors import StorageError
from queue_core.model import NewJob

__all__ = ["RedisSchedules"]

_SOURCE: list[str] = []


def _source() -> str:
    if not _SOURCE:
        _SOURCE.append("\n".join(map(lua_text, ("_lib", "schedule_tick", "enqueue"))))
    return _SOURCE[0]


class RedisSchedules:
    """Mixed into :class:`~backends.redis.RedisStorage` (whose client, argument
    prefix and script runner it uses)."""

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.schedules.SupportsSchedules.enqueue_tick`."""
        me: Any = self
        script = me.__dict__.get("_schedule_tick")
        if script is None:
            script = me._schedule_tick = me._r.register_script(_source())
        args = me._args(now)
        args += (schedule, tick_ms, *enqueue_args(job))
        with translate_errors("enqueue_tick"):
            res = me._run(script, args)
        if res and res[0] == b"tick":
            return False
        if res and res[0] == b"dup":
            raise StorageError(f"job id {res[1].decode()!r} already exists")
        return True

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.schedules.SupportsSchedules.schedule_ticks`."""
        me: Any = self
        if me._closed:
            raise StorageError("RedisStorage is closed")
        with translate_errors("schedule_ticks"):
            raw = me._r.hgetall(f"{me.key_prefix}:schedules")
        return {k.decode(): int(v) for k, v in raw.items()}

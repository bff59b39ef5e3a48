"""Progress of the Redis backend (``SupportsProgress``): each job's latest report.

A report lives on its job's hash (``pg``: ``[fraction, message]`` as JSON, ``pa``: when
it was stored), so it is kept after the job ends and pruned with it. ``progress.lua``
stores one when the attempt is current (fenced like ``heartbeat.lua``; on a Redis Cluster
in the home the lease token names, ``backends/redis/homes.py``); ``finish.lua`` stores the
one an end carries, in the same script, only when the end takes
(:func:`encode` packs it for both).
"""

from __future__ import annotations

import json

from backends.redis.errors import translate_errors
from backends.redis.store import RedisStore
from queue_core.records.control import Progress, ProgressUpdate
from queue_core.records.jobs import LeaseRef, dt_from_ms

__all__ = ["RedisProgress", "encode"]


def encode(update: ProgressUpdate | None) -> str:
    """A report as the scripts store it (``''``: none)."""
    if update is None:
        return ""
    return json.dumps([update.fraction, update.message])


class RedisProgress:
    """:class:`~queue_core.storage.control.SupportsProgress` of one store."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._set = store.script("progress")

    def set_progress(self, ref: LeaseRef, update: ProgressUpdate, now: int | None) -> bool:
        """``SupportsProgress.set_progress``: one ``progress.lua`` call."""
        token, home = self.store.homes.split(ref.lease_token)
        args = self.store.args(now, home if self.store.cluster else None)
        args += (ref.job_id, ref.attempt, token, encode(update))
        with translate_errors("set_progress"):
            return bool(self.store.call(self._set, args))

    def get_progress(self, job_id: str) -> Progress | None:
        """``SupportsProgress.get_progress``: the job hash's ``pg`` and ``pa``."""
        self.store.args(None)  # refused once closed
        (home,) = self.store.homes.find([job_id])
        with translate_errors("get_progress"):
            raw, at = self.store.client.hmget(self.store.keys.job(job_id, home), ["pg", "pa"])
        if raw is None or at is None:
            return None
        fraction, message = json.loads(raw)
        when = dt_from_ms(int(at))
        assert when is not None
        return Progress(fraction=float(fraction), message=message, at=when)

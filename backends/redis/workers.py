"""The worker registry and the cancel poll of ``redis://`` (see :mod:`queue_core.records.workers`).

Worker records are JSON values of one hash, ``<prefix>:workers`` (field = worker id),
in the storage's shared home on a cluster. :meth:`RedisWorkers.list_workers` reads it
with ``HGETALL`` and deletes the records it judged dead with a compare-and-delete script (a
record refreshed meanwhile is kept). The cancel poll reads the ``st``/``att``/``tok``/``cr``
fields of each job hash in one pipeline (in the home its lease token names).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.redis.errors import translate_errors
from backends.redis.store import RedisStore
from queue_core.records.jobs import LeaseRef
from queue_core.records.workers import WorkerInfo
from queue_core.rules.workers import live_workers

__all__ = ["RedisWorkers"]

_DROP_IF_SAME = """
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
"""


class RedisWorkers:
    """:class:`~queue_core.storage.abilities.SupportsWorkerRegistry` and
    :class:`~queue_core.storage.abilities.SupportsCancelPoll` of one store."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._key = f"{store.key_prefix}:workers"

    def register_worker(self, info: WorkerInfo) -> None:
        """``SupportsWorkerRegistry.register_worker``."""
        with translate_errors("register_worker"):
            self.store.client.hset(self._key, info.id, info.to_json())

    def deregister_worker(self, worker_id: str) -> None:
        """``SupportsWorkerRegistry.deregister_worker``."""
        with translate_errors("deregister_worker"):
            self.store.client.hdel(self._key, worker_id)

    def list_workers(self, now: int | None) -> list[WorkerInfo]:
        """``SupportsWorkerRegistry.list_workers`` (``now`` omitted: the server's clock)."""
        t = self.store.now(now)
        with translate_errors("list_workers"):
            raw: dict[bytes, bytes] = self.store.client.hgetall(self._key)
        texts = {WorkerInfo.from_json(v): v for v in raw.values()}
        live, dead = live_workers(list(texts), t)
        if dead:
            by_id = {info.id: text for info, text in texts.items()}
            args: list[Any] = [x for worker_id in dead for x in (worker_id, by_id[worker_id])]
            with translate_errors("list_workers"):
                self.store.client.eval(_DROP_IF_SAME, 1, self._key, *args)
        return live

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """``SupportsCancelPoll.cancel_requested``: one pipeline of ``HMGET``, a read only."""
        if not refs:
            return []
        tokens = [self.store.homes.split(ref.lease_token) for ref in refs]
        with translate_errors("cancel_requested"):
            pipe = self.store.client.pipeline(transaction=False)
            for ref, (_, home) in zip(refs, tokens, strict=True):
                pipe.hmget(self.store.keys.job(ref.job_id, home), "st", "att", "tok", "cr")
            rows = pipe.execute()
        out = []
        for ref, (token, _), (st, att, tok, cr) in zip(refs, tokens, rows, strict=True):
            current = st == b"running" and att == str(ref.attempt).encode()
            if current and tok == token.encode() and cr:
                out.append(ref)
        return out

"""The worker registry and the cancel poll of ``redis://`` (see :mod:`queue_core.workers`).

Worker records are JSON values of one hash, ``<prefix>:workers`` (field = worker id),
in the storage's slot on a cluster. :meth:`RedisWorkers.list_workers` reads it with
``HGETALL`` and deletes the records it judged dead with a compare-and-delete script (a
record refreshed meanwhile is kept). The cancel poll reads the ``st``/``att``/``tok``/``cr``
fields of each job hash in one pipeline.

:class:`RedisWorkers` extends :class:`~backends.redis.flows.RedisFlows` so that
:class:`~backends.redis.RedisStorage` (at its size cap) takes both with one base class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from backends.redis.errors import translate_errors
from backends.redis.flows import RedisFlows
from queue_core.model import LeaseRef
from queue_core.workers import WorkerInfo, live_workers

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


class RedisWorkers(RedisFlows):
    """:class:`~queue_core.workers.SupportsWorkerRegistry` and
    :class:`~queue_core.workers.SupportsCancelPoll` on Redis."""

    def _workers_key(self) -> str:
        return f"{self.keys.prefix}:workers"

    def register_worker(self, info: WorkerInfo) -> None:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.register_worker`."""
        with translate_errors("register_worker"):
            self._r.hset(self._workers_key(), info.id, info.to_json())

    def deregister_worker(self, worker_id: str) -> None:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.deregister_worker`."""
        with translate_errors("deregister_worker"):
            self._r.hdel(self._workers_key(), worker_id)

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.list_workers` (``now``
        omitted: the server's clock)."""
        t = self._flow_now(now)
        key = self._workers_key()
        with translate_errors("list_workers"):
            raw: dict[bytes, bytes] = self._r.hgetall(key)
        texts = {WorkerInfo.from_json(v): v for v in raw.values()}
        live, dead = live_workers(list(texts), t)
        if dead:
            by_id = {info.id: text for info, text in texts.items()}
            args: list[Any] = [x for worker_id in dead for x in (worker_id, by_id[worker_id])]
            with translate_errors("list_workers"):
                self._r.eval(_DROP_IF_SAME, 1, key, *args)
        return live

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """See :meth:`queue_core.workers.SupportsCancelPoll.cancel_requested`: one
        pipeline of ``HMGET``, a read only."""
        if not refs:
            return []
        with translate_errors("cancel_requested"):
            pipe = self._r.pipeline(transaction=False)
            for ref in refs:
                pipe.hmget(self.keys.job(ref.job_id), "st", "att", "tok", "cr")
            rows = pipe.execute()
        out = []
        for ref, (st, att, tok, cr) in zip(refs, rows, strict=True):
            current = st == b"running" and att == str(ref.attempt).encode()
            if current and tok == ref.lease_token.encode() and cr:
                out.append(ref)
        return out

"""The worker registry and the cancel poll of ``memory://`` (see
:mod:`queue_core.records.workers`)."""

from __future__ import annotations

from collections.abc import Sequence

from backends.memory.store import MemoryStore
from queue_core.records.jobs import LeaseRef
from queue_core.records.workers import WorkerInfo
from queue_core.rules.workers import live_workers

__all__ = ["MemoryWorkers"]


class MemoryWorkers:
    """:class:`~queue_core.storage.abilities.SupportsWorkerRegistry` and
    :class:`~queue_core.storage.abilities.SupportsCancelPoll` under the store's lock."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.workers: dict[str, WorkerInfo] = {}

    def register_worker(self, info: WorkerInfo) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.register_worker`."""
        with self.store.cond:
            self.workers[info.id] = info

    def deregister_worker(self, worker_id: str) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.deregister_worker`."""
        with self.store.cond:
            self.workers.pop(worker_id, None)

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.list_workers`."""
        with self.store.cond:
            live, dead = live_workers(list(self.workers.values()), self.store.now(now))
            for worker_id in dead:
                del self.workers[worker_id]
            return live

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """See :meth:`queue_core.storage.abilities.SupportsCancelPoll.cancel_requested`."""
        with self.store.cond:
            out = []
            for ref in refs:
                job = self.store.current(ref)
                if job is not None and job.cancel_requested:
                    out.append(ref)
            return out

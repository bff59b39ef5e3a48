"""The worker registry and the cancel poll of ``memory://`` (mixed into
:class:`backends.memory.MemoryStorage`; see :mod:`queue_core.workers`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from queue_core.model import LeaseRef
from queue_core.workers import WorkerInfo, live_workers

if TYPE_CHECKING:
    from backends._memory_records import _Job

__all__ = ["MemoryWorkers"]


class MemoryWorkers:
    """:class:`~queue_core.workers.SupportsWorkerRegistry` and
    :class:`~queue_core.workers.SupportsCancelPoll` under the storage's one lock."""

    _cond: threading.Condition
    _workers: dict[str, WorkerInfo]

    if TYPE_CHECKING:  # provided by MemoryIndex

        def _now(self, now: int | None) -> int: ...

        def _current(self, ref: LeaseRef) -> _Job | None: ...

    def register_worker(self, info: WorkerInfo) -> None:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.register_worker`."""
        with self._cond:
            self._workers[info.id] = info

    def deregister_worker(self, worker_id: str) -> None:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.deregister_worker`."""
        with self._cond:
            self._workers.pop(worker_id, None)

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """See :meth:`queue_core.workers.SupportsWorkerRegistry.list_workers`."""
        with self._cond:
            live, dead = live_workers(list(self._workers.values()), self._now(now))
            for worker_id in dead:
                del self._workers[worker_id]
            return live

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """See :meth:`queue_core.workers.SupportsCancelPoll.cancel_requested`."""
        with self._cond:
            out = []
            for ref in refs:
                job = self._current(ref)
                if job is not None and job.cancel_requested:
                    out.append(ref)
            return out

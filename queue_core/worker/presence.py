"""Two worker services that make the worker visible and reachable from outside.

* The presence service registers the worker in storage when it starts
  (:class:`~queue_core.storage.abilities.SupportsWorkerRegistry`), refreshes the record every
  :func:`~queue_core.rules.workers.refresh_interval` of its ttl with the busy and stuck slot
  counts, and removes it when the worker stops cleanly. A worker killed without that
  drops out of ``list_workers`` once its ttl has passed.
* The cancel poll reads, every :data:`~queue_core.records.workers.CANCEL_POLL_INTERVAL`
  seconds and in one batched call (:class:`~queue_core.storage.abilities.SupportsCancelPoll`),
  which of the worker's running attempts have a cancel request, and stops them the way
  lease renewal does (async bodies cancelled, process groups stopped, thread bodies
  flagged through ``ctx.cancelled``), so ``cancel()`` reaches a running body within a
  second instead of at the next renewal.

Both wait on the worker's clock and do nothing on a storage without the ability.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

import anyio
from anyio import to_thread

from queue_core.records.errors import StorageError
from queue_core.records.workers import CANCEL_POLL_INTERVAL, WorkerInfo
from queue_core.rules.workers import refresh_interval
from queue_core.storage.abilities import SupportsCancelPoll, SupportsWorkerRegistry
from queue_core.storage.protocol import Storage
from queue_core.worker.log import log
from queue_core.worker.outage import Outage
from queue_core.worker.slots import SlotTable
from queue_core.worker.timing import Timing

__all__ = ["CancelPoll", "Presence"]


class Presence:
    """The worker's record in storage: registered, refreshed, removed on a clean stop."""

    def __init__(
        self,
        storage: Storage,
        worker_id: str,
        queues: Sequence[str],
        table: SlotTable,
        ttl_ms: int,
        timing: Timing,
        outage: Outage,
        limiter: anyio.CapacityLimiter,
    ) -> None:
        self.storage = storage
        self.worker_id = worker_id
        self.queues = tuple(queues)
        self.table = table
        self.ttl_ms = ttl_ms
        self.timing = timing
        self.outage = outage
        self.limiter = limiter

    def info(self, now: int) -> WorkerInfo:
        """The worker's record as of ``now`` (epoch ms on the worker's clock)."""
        return WorkerInfo(
            id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            slots=self.table.slots,
            busy=self.table.busy(),
            stuck=self.table.stuck,
            started_at=now,
            last_seen=now,
            ttl_ms=self.ttl_ms,
        )

    async def keep_up(self) -> None:
        """Register the worker, then refresh its record until cancelled."""
        storage = self.storage
        if not isinstance(storage, SupportsWorkerRegistry):
            return
        timing, outage, table = self.timing, self.outage, self.table
        info = self.info(timing.now_ms())
        interval = refresh_interval(self.ttl_ms)
        while True:
            try:
                await to_thread.run_sync(storage.register_worker, info, limiter=self.limiter)
                outage.ok()
            except StorageError as exc:
                if not outage.failed("worker registration", exc):
                    log.warning("worker registration failed (%s); will retry", exc)
            await timing.sleep(interval)
            info = info.seen_at(timing.now_ms(), busy=table.busy(), stuck=table.stuck)

    async def deregister(self) -> None:
        """Remove the worker's record (a clean stop); a storage error is only logged."""
        storage = self.storage
        if not isinstance(storage, SupportsWorkerRegistry):
            return
        try:
            await to_thread.run_sync(
                storage.deregister_worker, self.worker_id, limiter=self.limiter
            )
        except StorageError as exc:
            log.warning("worker deregistration failed (%s)", exc)


class CancelPoll:
    """Stops running attempts whose job has a cancel request, polled every half second."""

    def __init__(
        self,
        storage: Storage,
        table: SlotTable,
        timing: Timing,
        outage: Outage,
        limiter: anyio.CapacityLimiter,
    ) -> None:
        self.storage = storage
        self.table = table
        self.timing = timing
        self.outage = outage
        self.limiter = limiter

    async def poll(self) -> None:
        storage = self.storage
        if not isinstance(storage, SupportsCancelPoll):
            return
        while True:
            await self.timing.sleep(CANCEL_POLL_INTERVAL)
            live = {a.ref: a for a in self.table.live() if not a.cancel_requested}
            if not live:
                continue
            try:
                asked = await to_thread.run_sync(
                    storage.cancel_requested, list(live), limiter=self.limiter
                )
            except StorageError as exc:
                if not self.outage.failed("cancel poll", exc):
                    log.warning("cancel poll failed (%s)", exc)
                continue
            self.outage.ok()
            for ref in asked:
                att = live[ref]
                if not att.ended and not att.cancel_requested:
                    att.cancel_requested = True
                    att.stop()

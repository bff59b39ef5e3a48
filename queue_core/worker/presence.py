"""Two worker services that make the worker visible and reachable from outside.

* The presence service registers the worker in storage when it starts
  (:class:`~queue_core.workers.SupportsWorkerRegistry`), refreshes the record every
  :func:`~queue_core.workers.refresh_interval` of its ttl with the busy and stuck slot
  counts, and removes it when the worker stops cleanly. A worker killed without that
  drops out of ``list_workers`` once its ttl has passed.
* The cancel poll reads, every :data:`~queue_core.workers.CANCEL_POLL_INTERVAL`
  seconds and in one batched call (:class:`~queue_core.workers.SupportsCancelPoll`),
  which of the worker's running attempts have a cancel request, and stops them the way
  lease renewal does (async bodies cancelled, process groups stopped, thread bodies
  flagged through ``ctx.cancelled``), so ``cancel()`` reaches a running body within a
  second instead of at the next renewal.

Both wait on the worker's clock and do nothing on a storage without the ability.
"""

from __future__ import annotations

import os
import socket

from anyio import to_thread

from queue_core.errors import StorageError
from queue_core.worker.base import WorkerState
from queue_core.worker.log import log
from queue_core.workers import (
    CANCEL_POLL_INTERVAL,
    SupportsCancelPoll,
    SupportsWorkerRegistry,
    WorkerInfo,
    refresh_interval,
)

__all__ = ["cancel_poll_loop", "deregister", "presence_loop", "worker_info"]


def worker_info(w: WorkerState, now: int) -> WorkerInfo:
    """``w``'s record as of ``now`` (epoch ms on the worker's clock)."""
    return WorkerInfo(
        id=w.id,
        host=socket.gethostname(),
        pid=os.getpid(),
        queues=tuple(w._queues),
        slots=w.slots,
        busy=w._table.busy(),
        stuck=w._table.stuck,
        started_at=now,
        last_seen=now,
        ttl_ms=w.presence_ttl_ms,
    )


async def presence_loop(w: WorkerState) -> None:
    """Register ``w``, then refresh its record until cancelled."""
    storage = w.storage
    if not isinstance(storage, SupportsWorkerRegistry):
        return
    info = worker_info(w, w._timing.now_ms())
    interval = refresh_interval(w.presence_ttl_ms)
    while True:
        try:
            await to_thread.run_sync(storage.register_worker, info, limiter=w._io)
            w._outage.ok()
        except StorageError as exc:
            if not w._outage.failed("worker registration", exc):
                log.warning("worker registration failed (%s); will retry", exc)
        await w._timing.sleep(interval)
        table = w._table
        info = info.seen_at(w._timing.now_ms(), busy=table.busy(), stuck=table.stuck)


async def deregister(w: WorkerState) -> None:
    """Remove ``w``'s record (a clean stop); a storage error is only logged."""
    storage = w.storage
    if not isinstance(storage, SupportsWorkerRegistry):
        return
    try:
        await to_thread.run_sync(storage.deregister_worker, w.id, limiter=w._io)
    except StorageError as exc:
        log.warning("worker deregistration failed (%s)", exc)


async def cancel_poll_loop(w: WorkerState) -> None:
    """Stop running attempts whose job has a cancel request, polled every half second."""
    storage = w.storage
    if not isinstance(storage, SupportsCancelPoll):
        return
    while True:
        await w._timing.sleep(CANCEL_POLL_INTERVAL)
        live = {a.ref: a for a in w._table.live() if not a.cancel_requested}
        if not live:
            continue
        try:
            asked = await to_thread.run_sync(storage.cancel_requested, list(live), limiter=w._io)
        except StorageError as exc:
            if not w._outage.failed("cancel poll", exc):
                log.warning("cancel poll failed (%s)", exc)
            continue
        w._outage.ok()
        for ref in asked:
            att = live[ref]
            if not att.ended and not att.cancel_requested:
                att.cancel_requested = True
                w._stop_attempt(att)

"""Heartbeats: the sinks a body's ``ctx.heartbeat()`` calls, and the writer service.

A sync body in a thread writes its heartbeats itself, on its own thread
(:meth:`Heartbeats.direct`). An async body, and the child of a process attempt run on the
loop, queue theirs (:meth:`Heartbeats.queued`): the writer (a task of the worker,
:meth:`Heartbeats.run_writer`) writes each queued one; a cancel request it learns of
stops the attempt, and a lost lease ends it. The last heartbeat's time is the worker
clock's: the watchdog judges heartbeat silence against it.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio import to_thread

from queue_core.records.errors import LeaseLost, StorageError
from queue_core.records.jobs import LeaseRef
from queue_core.storage.protocol import Storage
from queue_core.worker.log import log
from queue_core.worker.outage import Outage
from queue_core.worker.slots import Attempt
from queue_core.worker.state import RunState
from queue_core.worker.timing import Timing

__all__ = ["Heartbeats"]


class Heartbeats:
    """Hands out heartbeat sinks and writes the queued heartbeats."""

    def __init__(
        self,
        run: RunState,
        storage: Storage,
        timing: Timing,
        outage: Outage,
        limiter: anyio.CapacityLimiter,
    ) -> None:
        self.run = run
        self.storage = storage
        self.timing = timing
        self.outage = outage
        self.limiter = limiter

    def sink(self, att: Attempt, *, loop: bool) -> Callable[[], bool]:
        """``att``'s ``on_heartbeat``: queued for the writer (``loop``) or written at once."""
        return self.queued(att) if loop else self.direct(att)

    def direct(self, att: Attempt) -> Callable[[], bool]:
        """A sink that writes on the calling (body) thread; returns whether to stop."""
        storage, ref, clock, outage = self.storage, att.ref, self.timing.clock, self.outage

        def beat() -> bool:
            att.last_beat = clock.monotonic()
            try:
                return storage.heartbeat(ref)
            except LeaseLost:
                att.lease_lost = True
                return True
            except StorageError as exc:
                if not outage.failed("heartbeat", exc):
                    log.warning("heartbeat of job %s failed (%s)", ref.job_id, exc)
                return att.stop_requested()

        return beat

    def queued(self, att: Attempt) -> Callable[[], bool]:
        """A sink, called on the loop, that queues the heartbeat for :meth:`run_writer`."""
        clock, run = self.timing.clock, self.run

        def beat() -> bool:
            att.last_beat = clock.monotonic()
            run.heartbeats[att.ref] = att
            run.hb_wake.set()
            return att.stop_requested()

        return beat

    async def run_writer(self) -> None:
        """Write the heartbeats that async bodies (and process children) queued."""
        run = self.run
        while True:
            if not run.heartbeats:
                run.hb_wake = anyio.Event()
                await run.hb_wake.wait()
                continue
            pending, run.heartbeats = run.heartbeats, {}
            for ref, att in pending.items():
                if not att.ended:
                    await self._write(ref, att)

    async def _write(self, ref: LeaseRef, att: Attempt) -> None:
        try:
            cancel = await to_thread.run_sync(self.storage.heartbeat, ref, limiter=self.limiter)
        except LeaseLost:
            att.lease_lost = True
            att.ended = True
            att.stop()
            return
        except StorageError as exc:
            if not self.outage.failed("heartbeat", exc):
                log.warning("heartbeat of job %s failed (%s)", ref.job_id, exc)
            return
        if cancel and not att.cancel_requested:
            att.cancel_requested = True
            att.stop()

"""Lease renewal: every held lease renewed in one storage call each third of the lease
(the running attempts' and those of the jobs held ahead of free slots, :mod:`.prefetch`).

Storage answers which leases were lost (the attempt was reaped, e.g. for heartbeat
silence) and which jobs have a cancel request: a lost one ends the attempt (a thread
body goes on, its slot stuck), a cancel stops the body. The waits run on the worker's
clock.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio import to_thread

from queue_core.records.errors import StorageError
from queue_core.records.jobs import LeaseRef, RenewResult
from queue_core.rules import renew_interval
from queue_core.storage.protocol import Storage
from queue_core.worker.log import log
from queue_core.worker.outage import Outage
from queue_core.worker.state import RunState
from queue_core.worker.timing import Timing

__all__ = ["LeaseRenewer"]


class LeaseRenewer:
    """Renews the leases of the running attempts (``lease`` seconds, ``lease_ms``, each)."""

    def __init__(
        self,
        run: RunState,
        storage: Storage,
        lease: float,
        lease_ms: int,
        timing: Timing,
        outage: Outage,
        limiter: anyio.CapacityLimiter,
        on_held: Callable[[RenewResult], None] | None = None,
    ) -> None:
        self.run = run
        self.on_held = on_held
        """Told of each renewal that included held jobs (``ClaimLoop.held_renewed``)."""
        self.storage = storage
        self.lease = lease
        self.lease_ms = lease_ms
        self.timing = timing
        self.outage = outage
        self.limiter = limiter

    async def renew_loop(self) -> None:
        """Renew every held lease each third of the lease (on the worker's clock)."""
        interval = renew_interval(self.lease)
        table = self.run.table
        while True:
            await self.timing.sleep(interval)
            refs = [a.ref for a in table.live()] + self.run.held.refs()
            if refs:
                await self.renew(refs)

    async def renew(self, refs: list[LeaseRef]) -> None:
        try:
            res = await to_thread.run_sync(
                self.storage.renew, refs, self.lease_ms, limiter=self.limiter
            )
        except StorageError as exc:
            if not self.outage.failed("lease renewal", exc):
                log.warning("lease renewal failed (%s)", exc)
            return
        run = self.run
        if self.on_held is not None and run.held.jobs:
            self.on_held(res)
        running = run.table.running
        for ref in res.lost:
            att = running.get(ref)
            if att is not None and not att.ended:
                log.warning("lease of job %s attempt %d lost", ref.job_id, ref.attempt)
                att.lease_lost = True
                att.ended = True
                att.stop()
                if att.mode == "thread":  # reaped (e.g. heartbeat_timeout): body goes on
                    run.table.mark_stuck(att)
                    run.slot_wake.set()
        for ref in res.cancel_requested:
            att = running.get(ref)
            if att is not None and not att.ended:
                att.cancel_requested = True
                att.stop()

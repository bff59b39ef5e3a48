"""Lease renewal: every held lease renewed in one storage call each third of the lease
(the running attempts' and those of the jobs held ahead of free slots, :mod:`.prefetch`).

Storage answers which leases were lost (the attempt was reaped, e.g. for heartbeat
silence, or superseded) and which jobs have a cancel request: a lost one ends the
attempt (a thread body goes on, its slot stuck) and is logged with how its record says
it ended, a cancel stops the body. The waits run on the worker's clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio import to_thread

from queue_core.records.errors import StorageError
from queue_core.records.jobs import LeaseRef, Reason, RenewResult
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
        lost: list[LeaseRef] = []
        for ref in res.lost:
            att = running.get(ref)
            if att is not None and not att.ended:
                lost.append(ref)
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
        for ref in lost:
            await self._say_lost(ref)

    async def _say_lost(self, ref: LeaseRef) -> None:
        """Log the lost lease of ``ref`` with how its attempt's record says it ended (one
        read; rare): INFO when a newer job superseded it (the task asked for that), else
        WARNING."""
        why, superseded = "", False
        read = self.storage.list_attempts
        try:
            records = await to_thread.run_sync(read, ref.job_id, limiter=self.limiter)
        except Exception:  # noqa: BLE001 - the line is said without the reason then
            records = []
        rec = next((a for a in records if a.number == ref.attempt), None)
        if rec is not None and rec.outcome is not None:
            why = f": the attempt ended {rec.outcome.value}"
            why += f", reason {rec.reason}" if rec.reason else ""
            superseded = rec.reason == Reason.SUPERSEDED
        level = logging.INFO if superseded else logging.WARNING
        log.log(level, "lease of job %s attempt %d lost%s", ref.job_id, ref.attempt, why)

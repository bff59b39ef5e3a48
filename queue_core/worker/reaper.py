"""The reaper service: storage ``reap`` every ``reap_interval``, ``prune`` in small batches,
and after each pass the worker's auto-replay of dead letters.

Reaping is atomic in storage, so every worker runs a reaper and any number of them may
reap at once; each stale attempt is recorded exactly once. Its waits run on the
worker's clock.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
from anyio import to_thread

from queue_core.records.errors import StorageError
from queue_core.records.jobs import JobState
from queue_core.storage.protocol import Storage
from queue_core.worker.outage import Outage
from queue_core.worker.timing import Timing

__all__ = ["Backoff", "reaper_loop"]

log = logging.getLogger("queue_core.worker")

REAP_BATCH = 100
PRUNE_EVERY = 5.0
"""Seconds between prune passes."""
PRUNE_BATCH = 1000
"""Finished jobs one ``prune`` call deletes at most (one short transaction)."""
PRUNE_BATCHES = 20
"""``prune`` calls in one pass at most: a pass goes on while each call deletes a whole
batch, so one worker keeps pace with ``PRUNE_BATCH * PRUNE_BATCHES / PRUNE_EVERY`` =
4,000 jobs/s coming due. (It was one call of 1,000 a minute: a queue finishing more than
1,000 jobs a minute per worker kept a history that outgrew its retention, issue 30.)"""


class Backoff:
    """Exponential backoff for storage outages: 0.05 s doubling up to ``cap``."""

    __slots__ = ("initial", "cap", "current")

    def __init__(self, initial: float = 0.05, cap: float = 5.0) -> None:
        self.initial = initial
        self.cap = cap
        self.current = 0.0

    def next(self) -> float:
        self.current = self.initial if self.current == 0.0 else min(self.cap, self.current * 2)
        return self.current

    def reset(self) -> None:
        self.current = 0.0


async def reaper_loop(
    storage: Storage,
    interval: float,
    limiter: anyio.CapacityLimiter,
    timing: Timing,
    after_pass: Callable[[], Awaitable[None]] | None = None,
    *,
    outage: Outage | None = None,
    hold: float = 0.0,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Reap stale and overdue attempts forever (until cancelled).

    The first pass runs at once, so a restarted worker recovers its predecessor's jobs
    without waiting an interval. ``after_pass`` (auto-replay) runs after each pass.
    """
    backoff = Backoff()
    last_prune = timing.monotonic()
    task_status.started()
    while True:
        held = outage.hold_left(hold) if outage is not None else 0.0
        if held > 0:  # an outage: every attempt may look abandoned (see outage.py)
            await timing.sleep(min(held, interval))
            continue
        try:
            await _reap_all(storage, limiter)
            if timing.monotonic() - last_prune >= PRUNE_EVERY:
                last_prune = timing.monotonic()
                await _prune_due(storage, limiter)
            if after_pass is not None:
                await after_pass()
            backoff.reset()
            if outage is not None:
                outage.ok()
            await timing.sleep(interval)
        except StorageError as exc:
            delay = backoff.next()
            if outage is None or not outage.failed("reaper", exc):
                log.warning("reaper: storage error (%s); retrying in %.2f s", exc, delay)
            await timing.sleep(max(delay, min(interval, 1.0)))


async def _prune_due(storage: Storage, limiter: anyio.CapacityLimiter) -> None:
    """Prune in batches of :data:`PRUNE_BATCH` while there is a whole batch due (at most
    :data:`PRUNE_BATCHES`): small steady deletes rather than a burst."""
    for _ in range(PRUNE_BATCHES):
        pruned = await to_thread.run_sync(lambda: storage.prune(limit=PRUNE_BATCH), limiter=limiter)
        if pruned < PRUNE_BATCH:
            return


async def _reap_all(storage: Storage, limiter: anyio.CapacityLimiter) -> None:
    while True:
        reaped = await to_thread.run_sync(lambda: storage.reap(limit=REAP_BATCH), limiter=limiter)
        for r in reaped:
            level = logging.WARNING if r.state is JobState.DEAD else logging.INFO
            log.log(
                level, "reaped job %s attempt %d: %s -> %s", r.job_id, r.attempt, r.reason, r.state
            )
        if len(reaped) < REAP_BATCH:
            return

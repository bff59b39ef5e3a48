"""The reaper service: storage ``reap`` every ``reap_interval``, ``prune`` now and then,
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

from queue_core.errors import StorageError
from queue_core.model import JobState
from queue_core.storage import Storage
from queue_core.worker.outage import Outage
from queue_core.worker.timing import Timing

__all__ = ["Backoff", "reaper_loop"]

log = logging.getLogger("queue_core.worker")

REAP_BATCH = 100
PRUNE_EVERY = 60.0
"""Seconds between ``prune`` calls."""


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
                await to_thread.run_sync(storage.prune, limiter=limiter)
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

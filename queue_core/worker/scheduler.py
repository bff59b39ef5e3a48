"""The scheduler service: enqueue the ticks of the queue's periodic tasks (SPEC §11).

Every worker runs it (unless ``scheduler=False``; burst workers never do). At each
wake it reads the last tick per schedule, asks the pure core
(:func:`~queue_core.rules.ticks.tick_to_enqueue`) which tick is due, and hands that tick's
job to :meth:`~queue_core.storage.abilities.SupportsSchedules.enqueue_tick`, which stores it
only once however many schedulers race; then it sleeps, on the worker's clock, until the
earliest next tick. A tick that fell due while this scheduler ran is enqueued however
late it wakes, so a crashed scheduler loses no tick while another one runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import anyio
from anyio import to_thread

from queue_core.app.periodic import Periodic
from queue_core.records.errors import StorageError
from queue_core.records.jobs import dt_from_ms
from queue_core.rules.ticks import tick_to_enqueue
from queue_core.storage.abilities import SupportsSchedules
from queue_core.worker.log import log
from queue_core.worker.outage import Outage
from queue_core.worker.reaper import Backoff
from queue_core.worker.timing import Timing

if TYPE_CHECKING:
    from queue_core.worker.host import WorkerHost

__all__ = ["MAX_SLEEP", "Scheduler"]

MAX_SLEEP: Final = 60.0
"""Longest sleep between two passes (seconds), so a wall-clock jump is noticed."""


def _iso(ms: int) -> str:
    """A tick for people: ISO 8601 UTC, to the millisecond when it has some."""
    at = dt_from_ms(ms)
    assert at is not None
    spec = "milliseconds" if ms % 1000 else "seconds"
    return at.isoformat(timespec=spec).replace("+00:00", "Z")


class Scheduler:
    """Enqueues the ticks of ``queue``'s periodic tasks into ``storage``."""

    def __init__(
        self,
        queue: WorkerHost,
        storage: SupportsSchedules,
        timing: Timing,
        limiter: anyio.CapacityLimiter,
        outage: Outage | None = None,
    ) -> None:
        self.queue = queue
        self.outage = outage
        self.storage = storage
        self.timing = timing
        self.limiter = limiter
        self.periodic: dict[str, Periodic] = queue.periodic_tasks
        self.since_ms = timing.now_ms()
        self.enqueued = 0
        self.passes = 0

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Pass after pass until cancelled."""
        backoff = Backoff()
        task_status.started()
        while True:
            try:
                await self.run_once()
                backoff.reset()
                if self.outage is not None:
                    self.outage.ok()
                await self.timing.sleep(self.sleep_for(self.timing.now_ms()))
            except StorageError as exc:
                delay = backoff.next()
                if self.outage is None or not self.outage.failed("scheduler", exc):
                    log.warning("scheduler: storage error (%s); retrying in %.2f s", exc, delay)
                await self.timing.sleep(delay)
            except Exception:  # noqa: BLE001 - a bug here must not stop the worker
                delay = backoff.next()
                log.exception("scheduler: pass failed; retrying in %.2f s", delay)
                await self.timing.sleep(delay)

    async def run_once(self) -> int:
        """One pass: enqueue each due tick; return how many this pass stored."""
        now = self.timing.now_ms()
        last = await to_thread.run_sync(self.storage.schedule_ticks, limiter=self.limiter)
        stored = 0
        for name, periodic in self.periodic.items():
            tick = tick_to_enqueue(periodic.schedule, now, last.get(name), self.since_ms)
            if tick is None:
                continue
            task = self.queue.get_task(periodic.task_name)
            if task is None:
                continue
            job = task.tick_job(periodic.args, dict(periodic.kwargs), tick)
            took = await to_thread.run_sync(
                self.storage.enqueue_tick, name, tick, job, limiter=self.limiter
            )
            if took:
                stored += 1
                log.info("scheduled %s for tick %s as job %s", name, _iso(tick), job.id)
        self.enqueued += stored
        self.passes += 1
        return stored

    def sleep_for(self, now_ms: int) -> float:
        """Seconds until the earliest next tick (at most :data:`MAX_SLEEP`)."""
        nearest = min(p.schedule.next_tick(now_ms) for p in self.periodic.values())
        return min(MAX_SLEEP, max(0.0, (nearest - now_ms) / 1000.0))


def scheduler_for(
    queue: WorkerHost,
    storage: object,
    timing: Timing,
    limiter: anyio.CapacityLimiter,
    outage: Outage | None = None,
) -> Scheduler | None:
    """The scheduler a (non-burst) worker runs, or ``None`` when ``queue`` has no
    periodic task; a storage without :class:`SupportsSchedules` is logged and skipped."""
    if not queue.periodic_tasks:
        return None
    if not isinstance(storage, SupportsSchedules):
        log.error(
            "%s cannot run periodic tasks (it lacks SupportsSchedules): %s not scheduled",
            type(storage).__name__,
            ", ".join(sorted(queue.periodic_tasks)),
        )
        return None
    return Scheduler(queue, storage, timing, limiter, outage)

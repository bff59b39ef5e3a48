"""The worker's process-isolated attempts: an attempt in, a child's result recorded.

The :mod:`~queue_core.worker.process` package runs a body in a child and knows nothing of
jobs; this part turns an attempt into a run request and the
:class:`~queue_core.worker.process.ProcessResult` into the attempt's end.

A plain ``isolation="process"`` job (no per-call options, not a flow step) is handed to a
body thread, from the claim loop (:meth:`ProcessRuns.start`) or straight from the claim
thread (``ClaimLoop._start_direct``, with :meth:`ProcessRuns.call`): the body thread runs
the whole attempt with :meth:`ProcessPool.run_direct` (the child, its deadline,
heartbeats, progress reports, cancellation, the stop of its process group) and reports
the result back like a thread body's end, coalesced with the other ends of one loop
wake-up; the runner passes it to :meth:`ProcessRuns.end`. Jobs with per-call options and
flow steps run on the loop (:meth:`ProcessRuns.run`, with :meth:`ProcessPool.run`), their
call prepared there. The pool is made on first need (a worker that runs no such job never
imports it). A body's ``ctx.progress`` reports reach the worker's progress writer on
both paths, and the attempt's end carries the latest (:func:`_report`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queue_core.app.context import JobContext
from queue_core.app.task import DEFAULT_KILL_GRACE, Task
from queue_core.records.jobs import ErrorInfo, Outcome, Reason
from queue_core.worker.heartbeats import Heartbeats
from queue_core.worker.listeners import Listeners
from queue_core.worker.progress import ProgressWriter
from queue_core.worker.recording import Recorder
from queue_core.worker.scopes import carried_scopes
from queue_core.worker.slots import Attempt
from queue_core.worker.threads import BodyThreads
from queue_core.worker.timing import Timing
from queue_core.worker.watchdog import deadline_of

if TYPE_CHECKING:
    from queue_core.worker.process import ProcessPool, ProcessResult

__all__ = ["ProcessRuns"]


def _beat(att: Attempt, write: Callable[[], bool]) -> None:
    """A heartbeat from the child, written on the body thread; a cancel that storage
    reports stops the attempt (the wait polls ``att.stop_requested``)."""
    if write() and not att.stop_requested():
        att.cancel_requested = True


def _body_start(
    att: Attempt,
    monotonic: Callable[[], float],
    pool_monotonic: Callable[[], float],
    hold: float,
    at: float | None,
) -> None:
    """The child's body starts at ``at`` (the wait path's
    :data:`~queue_core.worker.process.deadline.BodyStart`): the watchdog counts the
    attempt's timeout and heartbeat silence from then, not from the request (a fresh
    child's start and its first import of the body's module are not the body's time;
    SPEC §4). ``None`` while the child imports: no deadline here (the wait path bounds
    the import) and silence judged no sooner than ``hold`` seconds from now. ``at`` is on
    the pool's clock (``pool_monotonic``, real time); ``monotonic`` is the worker's, which
    a test may drive."""
    now = monotonic()
    if at is None:
        att.deadline = None
        if att.job.heartbeat_ms:
            att.last_beat = now + hold
        return
    at = now - (pool_monotonic() - at)  # on the worker's clock
    att.deadline = deadline_of(att, at)
    if att.job.heartbeat_ms:
        att.last_beat = at  # the start counts as its first beat


def _report(att: Attempt, writer: ProgressWriter, fraction: float, message: str | None) -> None:
    """A ``ctx.progress`` report from the child (on the body thread, or on the loop),
    taken as a thread body's: kept by a :class:`JobContext` made for it on the first
    report (``att.ctx``: the attempt's end carries the latest one) and handed to the
    progress writer (which writes at most one per second)."""
    if att.ended:
        return  # timed out or lost meanwhile: its end is recorded
    ctx = att.ctx
    if ctx is None:
        job = att.job
        ctx = att.ctx = JobContext(
            job_id=job.id,
            attempt=job.attempt,
            execution_id=job.execution_id,
            step_id=job.step_id,
            on_progress=functools.partial(writer.report, att.ref),
        )
    ctx.progress(fraction, message)


class ProcessRuns:
    """Runs attempts in the worker's pool of children and records how they ended."""

    def __init__(
        self,
        *,
        size: int,
        max_tasks_per_child: int | None,
        recorder: Recorder,
        heartbeats: Heartbeats,
        progress: ProgressWriter,
        listeners: Listeners,
        timing: Timing,
        threads: BodyThreads,
    ) -> None:
        self.size = size
        self.max_tasks_per_child = max_tasks_per_child
        self.recorder = recorder
        self.heartbeats = heartbeats
        self.progress = progress
        """Writes the bodies' ``ctx.progress`` reports, as for thread bodies (SPEC §13)."""
        self.listeners = listeners
        self.timing = timing
        self.threads = threads
        self.pool: ProcessPool | None = None
        """Made on first need (:meth:`get_pool`), one child per slot at most."""
        self._lock = threading.Lock()
        """Makes the pool once, whether the loop or the claim thread asks first."""

    def get_pool(self) -> ProcessPool:
        pool = self.pool
        if pool is None:
            from queue_core.worker.process import ProcessPool

            with self._lock:
                pool = self.pool
                if pool is None:
                    pool = self.pool = ProcessPool(
                        self.size, max_tasks_per_child=self.max_tasks_per_child
                    )
        return pool

    # ------------------------------------------------------------------ on a body thread

    def start(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """On the loop: hand a process attempt to a body thread."""
        att.mode = "process"
        att.deadline = deadline_of(att, self.timing.monotonic())
        self.threads.submit(att, self.call(att, task, args, kwargs))

    def call(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Callable[[], ProcessResult]:
        """The call a body thread makes to run ``att`` in a child (made on the loop or the
        claim thread; ``att.claimed_at`` set)."""
        from queue_core.worker.process.child import PREP_BOUND
        from queue_core.worker.process.children import request_of

        pool = self.get_pool()
        job, listeners, monotonic = att.job, self.listeners.all, self.timing.monotonic
        grace = DEFAULT_KILL_GRACE if task.kill_grace is None else task.kill_grace
        beat = None
        if job.heartbeat_ms:
            beat = functools.partial(_beat, att, self.heartbeats.direct(att))
        report = functools.partial(_report, att, self.progress)
        body_start = functools.partial(
            _body_start, att, monotonic, pool.children.clock.monotonic, PREP_BOUND
        )
        func = task.func

        def call() -> ProcessResult:
            now = monotonic()
            deadline = deadline_of(att, now)  # the wait path counts it from the start
            timeout = None if deadline is None else max(0.0, deadline - now)
            request = request_of(
                func.__module__,
                func.__qualname__,
                args,
                kwargs,
                job_id=job.id,
                attempt=job.attempt,
                timeout=timeout,
                heartbeat_every=(job.heartbeat_ms or 3000) / 3000.0,
                wants_ctx=task.takes_ctx,
                execution_id=job.execution_id,
                step_id=job.step_id,
                carried=carried_scopes(listeners, job) if listeners else (),
            )
            return pool.run_direct(
                request,
                timeout=timeout,
                kill_grace=grace,
                heartbeat=beat,
                progress=report,
                cancelled=att.stop_requested,
                body_start=body_start,
            )

        return call

    # ------------------------------------------------------------------ on the loop

    async def run(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """On the loop: run ``att`` in a child (per-call options, flow steps) and record it."""
        from queue_core.worker.process.child import PREP_BOUND

        att.mode = "process"
        pool = self.get_pool()
        job = att.job
        kill_grace = task.kill_grace
        if att.call is not None and att.call.kill_grace is not None:
            kill_grace = att.call.kill_grace
        now = self.timing.monotonic()
        att.deadline = deadline = deadline_of(att, now)  # from the body's start
        res = await pool.run(
            task.func.__module__,
            task.func.__qualname__,
            args,
            kwargs,
            job_id=job.id,
            attempt=job.attempt,
            timeout=None if deadline is None else max(0.0, deadline - now),
            kill_grace=kill_grace if kill_grace is not None else DEFAULT_KILL_GRACE,
            heartbeat=self.heartbeats.queued(att) if job.heartbeat_ms else None,
            progress=functools.partial(_report, att, self.progress),
            heartbeat_every=(job.heartbeat_ms or 3000) / 3000.0,
            cancelled=att.stop_requested,
            wants_ctx=task.takes_ctx,
            execution_id=job.execution_id,
            step_id=job.step_id,
            carried=carried_scopes(self.listeners.all, job),
            body_start=functools.partial(
                _body_start, att, self.timing.monotonic, pool.children.clock.monotonic, PREP_BOUND
            ),
        )
        if not att.ended:
            self.end(att, res)

    def end(self, att: Attempt, res: ProcessResult) -> None:
        """Record how the child ended ``att``."""
        from queue_core.worker.process import ProcessOutcome

        recorder = self.recorder
        outcome = res.outcome
        if outcome is ProcessOutcome.RETURNED:
            recorder.succeed_value(att, res.value)
        elif outcome is ProcessOutcome.RAISED and res.error is not None:
            # classified like any body error (per-call overrides included), recorded
            # with the child's own traceback
            recorder.fail(att, res.error.exception, info=res.error_info())
        elif outcome is ProcessOutcome.TIMED_OUT:
            recorder.timed_out(att)
        elif outcome is ProcessOutcome.CANCELLED:
            recorder.stopped_end(att)
        else:
            # The body took its own process down (segfault, os._exit, OOM kill): that is
            # the body failing, not the worker being lost (issue 6), so outcome failed.
            info: ErrorInfo | None = res.error_info()
            decision = recorder.decide(att, Outcome.FAILED)
            recorder.decided(att, Outcome.FAILED, Reason.PROCESS_DIED, decision, info)

    async def aclose(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()

"""Process-isolated attempts started like thread bodies: no event-loop task per job.

A plain ``isolation="process"`` job (no per-call options, not a flow step) is handed to
a body thread, from the claim loop (:meth:`ProcessStarts._start_process`) or straight
from the claim thread (``Claiming._start_direct``). The body thread runs the whole
attempt with :func:`~queue_core.worker.process_direct.run_direct` (the child, its
deadline, heartbeats, cancellation, the stop of its process group) and reports the
:class:`~queue_core.worker.process.ProcessResult` back like a thread body's end, coalesced
with the other ends of one loop wake-up; ``Running._thread_done`` records it with
``_process_end``, as after :meth:`ProcessPool.run`. Jobs with per-call options and flow
steps still go through ``Running._run`` (their call is prepared on the loop).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queue_core.task import DEFAULT_KILL_GRACE, Task
from queue_core.worker.running import Decoded, Running
from queue_core.worker.scopes import carried_scopes
from queue_core.worker.services import deadline_of
from queue_core.worker.slots import Attempt

if TYPE_CHECKING:
    from queue_core.worker.base import WorkerState
    from queue_core.worker.process import ProcessPool, ProcessResult

__all__ = ["ProcessStarts", "process_pool"]

_POOL_LOCK = threading.Lock()
"""Makes a worker's pool once, whether the loop or the claim thread asks first."""


def process_pool(worker: WorkerState) -> ProcessPool:
    """The worker's pool of children, made on first need (one child per slot at most)."""
    pool: ProcessPool | None = worker._process_pool
    if pool is None:
        from queue_core.worker.process import ProcessPool

        with _POOL_LOCK:
            pool = worker._process_pool
            if pool is None:
                pool = worker._process_pool = ProcessPool(
                    worker.slots, max_tasks_per_child=worker.max_tasks_per_child
                )
    return pool


def _beat(att: Attempt, write: Callable[[], bool]) -> None:
    """A heartbeat from the child, written on the body thread; a cancel that storage
    reports stops the attempt (the wait polls ``att.stop_requested``)."""
    if write() and not att.stop_requested():
        att.cancel_requested = True


class ProcessStarts(Running):
    """Starts plain process-isolated attempts on body threads."""

    def _start_process(
        self, att: Attempt, task: Task[Any, Any], decoded: Decoded | None = None
    ) -> None:
        """On the loop: hand a process attempt to a body thread."""
        if decoded is None:
            decoded = self._decode(att, task)
            if decoded is None:
                self._free(att)
                return
        att.mode = "process"
        att.deadline = deadline_of(att)
        self._threads.submit(att, self._process_call(att, task, *decoded))

    def _process_call(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Callable[[], ProcessResult]:
        """The call a body thread makes to run ``att`` in a child (on the loop or the
        claim thread; ``att.claimed_at`` set)."""
        from queue_core.worker.process_direct import request_of, run_direct

        pool = process_pool(self)
        job, listeners, monotonic = att.job, self._listeners, self._timing.monotonic
        grace = DEFAULT_KILL_GRACE if task.kill_grace is None else task.kill_grace
        beat = None
        if job.heartbeat_ms:
            beat = functools.partial(_beat, att, self._direct_heartbeat(att))
        func = task.func

        def call() -> ProcessResult:
            deadline = deadline_of(att)
            timeout = None if deadline is None else max(0.0, deadline - monotonic())
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
            return run_direct(
                pool,
                request,
                timeout=timeout,
                kill_grace=grace,
                heartbeat=beat,
                cancelled=att.stop_requested,
            )

        return call

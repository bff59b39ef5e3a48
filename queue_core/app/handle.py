"""``JobHandle``: a reference to one enqueued job (state, attempts, result, cancel).

Also importable as ``queue_core.JobHandle`` and ``queue_core.app.task.JobHandle``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, runtime_checkable

from queue_core.records.control import Progress
from queue_core.records.errors import (
    JobCancelled,
    JobFailed,
    JobSkipped,
    NotFound,
)
from queue_core.records.jobs import (
    AttemptRecord,
    JobInfo,
    JobRecord,
    JobState,
    dt_from_ms,
)
from queue_core.storage.control import SupportsProgress

if TYPE_CHECKING:
    from queue_core.app.clock import Clock
    from queue_core.app.serializer import Serializer
    from queue_core.records.jobs import DeadJob
    from queue_core.storage.protocol import Storage

__all__ = ["HandleOwner", "JobHandle"]

R = TypeVar("R")

_FIRST_PAUSE = 0.002
_MAX_PAUSE = 0.1


class HandleOwner(Protocol):
    """What a :class:`JobHandle` reads through: the queue that made it (a
    :class:`~queue_core.Queue` is one)."""

    clock: Clock
    serializer: Serializer

    def storage(self) -> Storage:
        """The storage the job lives in."""
        ...

    def dead_letter(self, dead_id: str) -> DeadJob | None:
        """The dead-letter entry ``dead_id`` with its payload decoded, or ``None``."""
        ...


@runtime_checkable
class _SleepingClock(Protocol):
    def sleep(self, seconds: float) -> None: ...


_Rec = TypeVar("_Rec", bound="_HasState")


class _Finishable(Protocol):
    @property
    def finished(self) -> bool: ...


class _HasState(Protocol):
    @property
    def state(self) -> _Finishable: ...


def wait_finished(clock: Clock, read: Callable[[], _Rec], timeout: float | None, what: str) -> _Rec:
    """Poll ``read()`` until its record's state is finished; return that record.

    The wait is measured on ``clock`` and slept with ``clock.sleep`` when the clock has
    one (a manual clock advances instead of waiting), else :func:`time.sleep`; pauses grow
    from 2 ms to 100 ms. Shared by :meth:`JobHandle.result` and the flows'
    ``ExecutionHandle.result``.

    Raises:
        TimeoutError: not finished within ``timeout`` seconds (``None`` waits forever),
            naming ``what`` and its state.
    """
    sleep = clock.sleep if isinstance(clock, _SleepingClock) else time.sleep
    end = None if timeout is None else clock.monotonic() + timeout
    pause = _FIRST_PAUSE
    while True:
        rec = read()
        if rec.state.finished:
            return rec
        now = clock.monotonic()
        if end is not None and now >= end:
            raise TimeoutError(f"{what} has not finished within {timeout} s (state {rec.state})")
        sleep(pause if end is None else min(pause, max(0.0, end - now)))
        pause = min(pause * 1.5, _MAX_PAUSE)


class JobHandle(Generic[R]):
    """A reference to one enqueued job; ``R`` is the type of its task's result.

    ``task.delay(...)`` of a ``Task[P, R]`` returns a ``JobHandle[R]``, so a type checker
    knows what :meth:`result` returns; ``queue.job(id)`` returns a ``JobHandle[Any]``.
    Every blocking method has an ``*_async`` twin for event loops (:meth:`status_async`,
    :meth:`info_async`, :meth:`attempts_async`, :meth:`result_async`): it runs the
    storage call in a worker thread and never blocks the loop.

    Attributes:
        id: the job id.
    """

    __slots__ = ("id", "_queue")

    def __init__(self, queue: HandleOwner, job_id: str) -> None:
        self.id = job_id
        self._queue = queue

    def _record(self) -> JobRecord:
        rec = self._queue.storage().get_job(self.id)
        if rec is None:
            raise NotFound(f"no job with id {self.id!r}")
        return rec

    def status(self) -> JobState:
        """The job's current state."""
        return self._record().state

    def info(self) -> JobInfo:
        """A snapshot of the job: state, reason, attempts, result and timestamps."""
        rec = self._record()
        result = None
        if rec.result is not None and rec.state is JobState.SUCCEEDED:
            result = self._queue.serializer.loads_result(rec.result)
        return JobInfo(
            id=rec.id,
            state=rec.state,
            reason=rec.reason,
            task_name=rec.task_name,
            queue=rec.queue,
            attempts=rec.attempts,
            max_attempts=rec.max_attempts,
            result=result,
            error=rec.error.message if rec.error else None,
            error_class=rec.error.error_class if rec.error else None,
            priority=rec.priority,
            enqueued_at=dt_from_ms(rec.enqueued_at),
            run_at=dt_from_ms(rec.run_at),
            started_at=dt_from_ms(rec.started_at),
            finished_at=dt_from_ms(rec.finished_at),
            replay_of=rec.replay_of,
            dead_id=rec.dead_id,
        )

    def attempts(self) -> list[AttemptRecord]:
        """The records of every attempt so far, oldest first."""
        return self._queue.storage().list_attempts(self.id)

    def cancel(self) -> JobState:
        """Cancel the job: a queued job ends at once, a running one is asked to stop."""
        return self._queue.storage().cancel(self.id)

    def progress(self) -> Progress | None:
        """The latest progress the job's body reported with ``ctx.progress`` (``fraction``,
        ``message``, ``at``), or ``None``: none yet, or a storage without
        :class:`~queue_core.storage.control.SupportsProgress` (SPEC §13)."""
        storage = self._queue.storage()
        if not isinstance(storage, SupportsProgress):
            return None
        return storage.get_progress(self.id)

    def result(self, timeout: float | None = None) -> R:
        """Wait for the job to finish and return its value.

        The wait is measured on the queue's clock (``Queue(clock=...)``): it polls the
        job with pauses growing from 2 ms to 100 ms, and pauses with the clock's
        ``sleep(seconds)`` when the clock has one (a test clock then advances instead of
        sleeping), else with :func:`time.sleep`.

        Args:
            timeout: seconds to wait; ``None`` waits as long as it takes.

        Raises:
            JobFailed: the job is dead; ``.dead`` is its dead-letter entry.
            JobCancelled: the job was cancelled.
            JobSkipped: the job was skipped at enqueue.
            TimeoutError: the job has not finished within ``timeout``.
        """
        rec = wait_finished(self._queue.clock, self._record, timeout, f"job {self.id}")
        return self._value(rec)

    def _value(self, rec: JobRecord) -> R:
        if rec.state is JobState.SUCCEEDED:
            if rec.result is None:
                return None  # type: ignore[return-value]
            return self._queue.serializer.loads_result(rec.result)  # type: ignore[no-any-return]
        if rec.state is JobState.DEAD:
            dead = self._queue.dead_letter(rec.dead_id) if rec.dead_id else None
            err = rec.error
            detail = f": {err.error_class}: {err.message}" if err else ""
            raise JobFailed(
                f"job {self.id} ({rec.task_name}) is dead ({rec.reason}){detail}",
                job_id=self.id,
                dead=dead,
            )
        if rec.state is JobState.SKIPPED:
            raise JobSkipped(f"job {self.id} was skipped ({rec.reason})", job_id=self.id)
        raise JobCancelled(f"job {self.id} ended {rec.state} ({rec.reason})", job_id=self.id)

    # ------------------------------------------------------------------ async twins

    async def status_async(self) -> JobState:
        """:meth:`status` without blocking the event loop."""
        from queue_core.app._aio import run_sync

        return await run_sync(self.status)

    async def info_async(self) -> JobInfo:
        """:meth:`info` without blocking the event loop."""
        from queue_core.app._aio import run_sync

        return await run_sync(self.info)

    async def attempts_async(self) -> list[AttemptRecord]:
        """:meth:`attempts` without blocking the event loop."""
        from queue_core.app._aio import run_sync

        return await run_sync(self.attempts)

    async def progress_async(self) -> Progress | None:
        """:meth:`progress` without blocking the event loop."""
        from queue_core.app._aio import run_sync

        return await run_sync(self.progress)

    async def cancel_async(self) -> JobState:
        """:meth:`cancel` without blocking the event loop."""
        from queue_core.app._aio import run_sync

        return await run_sync(self.cancel)

    async def result_async(self, timeout: float | None = None) -> R:
        """:meth:`result` for event loops: waits with ``anyio.sleep``, never blocking.

        Each poll of storage runs in a worker thread; between polls the coroutine
        sleeps (pauses growing from 2 ms to 100 ms) on the event loop, so other tasks
        run. The timeout is measured on the queue's clock, as :meth:`result` does.

        Raises:
            JobFailed, JobCancelled, JobSkipped: as :meth:`result`.
            TimeoutError: the job has not finished within ``timeout`` seconds.
        """
        from queue_core.app._aio import run_sync, sleep
        from queue_core.app.clock import SystemClock

        clock = self._queue.clock
        # a test clock with sleep() advances instead of sleeping, as in result()
        manual = isinstance(clock, _SleepingClock) and not isinstance(clock, SystemClock)
        end = None if timeout is None else clock.monotonic() + timeout
        pause = _FIRST_PAUSE
        while True:
            rec = await run_sync(self._record)
            if rec.state.finished:
                return await run_sync(self._value, rec)
            now = clock.monotonic()
            if end is not None and now >= end:
                raise TimeoutError(
                    f"job {self.id} has not finished within {timeout} s (state {rec.state})"
                )
            wait = pause if end is None else min(pause, max(0.0, end - now))
            if manual:
                clock.sleep(wait)  # type: ignore[attr-defined]
                await sleep(0)
            else:
                await sleep(wait)
            pause = min(pause * 1.5, _MAX_PAUSE)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<JobHandle {self.id}>"

"""Eager mode: ``Queue(..., eager=True)`` runs each enqueued job to its end before
``.delay()`` / ``.apply()`` returns, without a worker, for application tests.

The job goes through storage exactly as with a worker -- claimed (an attempt record, a
lease), run, its end classified and decided by the worker's own recorder
(:class:`~queue_core.worker.recording.Recorder`: :func:`queue_core.rules.classify`,
:func:`queue_core.rules.decide`, the one dead-letter path) and recorded with
``Storage.finish`` -- so ``handle.status()``, ``attempts()`` and ``dead_letters()`` read
as after a real worker. What differs:

* retry delays are recorded, not slept: the runner keeps a virtual clock that jumps to
  the next attempt's ready time (attempt timestamps show the delays);
* every attempt runs in the calling process, recorded with ``mode="eager"``
  (``isolation="process"`` bodies too); ``async def`` bodies run on an event loop of
  their own in a helper thread, so ``.delay()`` may be called from async code;
* a timeout ends the attempt as on a worker (``timed_out``, then retry or dead letter);
  a sync body that overran is left running in its daemon thread, like a stuck thread
  body on a worker. Heartbeat bounds and schedule-to-start are not enforced, and
  ``dead_letter_replay`` does not replay (those are worker services);
* the claim takes the ready jobs of the job's queue in the storage's order, so other
  ready jobs of that queue run first (with a test storage holding only eager jobs,
  there are none).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final

import anyio

from queue_core.app.context import JobContext
from queue_core.records.errors import ConfigError, StorageError
from queue_core.records.jobs import (
    AttemptEnd,
    ClaimedJob,
    JobState,
    Reason,
    dt_from_ms,
)
from queue_core.worker.listeners import Listeners
from queue_core.worker.recording import Recorder, error_info
from queue_core.worker.running import bind_error
from queue_core.worker.settings import worker_id
from queue_core.worker.slots import Attempt
from queue_core.worker.timing import Timing

if TYPE_CHECKING:
    from queue_core.app.task import Task
    from queue_core.worker.host import WorkerHost

__all__ = ["EagerRunner"]

MODE: Final = "eager"
_MAX_CLAIMS: Final = 10_000
"""Bound on claims for one enqueue (a job has at most 100 attempts; the rest are other
ready jobs of its queue)."""


class _Body:
    """A body's outcome: returned ``value``, raised ``error``, or still running."""

    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class EagerRunner:
    """Runs one enqueued job of a :class:`~queue_core.Queue` to its end.

    One runner per enqueue (no state is shared between runs), so a body may itself
    enqueue eagerly, from any thread. Its ends are recorded by its own
    :class:`~queue_core.worker.recording.Recorder` into a list that :meth:`run` writes.
    """

    def __init__(self, queue: WorkerHost) -> None:
        self.queue = queue
        self.storage = queue.storage()
        self.id = f"eager:{worker_id()}"
        self.lease = queue.lease
        self.lease_ms = int(queue.lease * 1000)
        self._serializer = queue.serializer
        self._timing = Timing(queue.clock)
        self._ends: list[AttemptEnd] = []
        self.recorder = Recorder(
            worker_id=self.id,
            storage=self.storage,
            serializer=queue.serializer,
            timing=self._timing,
            listeners=Listeners((), self.id),
            put=self._ends.append,  # written by run(), never by a finisher
        )
        self._offset_ms = 0

    # ------------------------------------------------------------------ time

    def _now(self) -> int:
        """The virtual clock: the queue's clock plus every retry delay skipped so far."""
        return self.queue.clock.now_ms() + self._offset_ms

    def _skip_to(self, ready_at: int) -> int:
        now = self._now()
        if ready_at > now:
            self._offset_ms += ready_at - now
            now = ready_at
        return now

    # ------------------------------------------------------------------ run

    def run(self, job_id: str) -> None:
        """Run ``job_id`` until it is no longer queued (finished, or left queued when
        storage will not hand it out, e.g. its concurrency limit is reached)."""
        for _ in range(_MAX_CLAIMS):
            rec = self.storage.get_job(job_id)
            if rec is None or rec.state is not JobState.QUEUED:
                return
            now = self._skip_to(rec.run_at)
            claimed = self.storage.claim(self.id, [rec.queue], 1, self.lease_ms, now=now)
            if not claimed:
                return
            for job in claimed:
                self._attempt(job)
                self._record()

    def _record(self) -> None:
        ends = self._ends[:]
        self._ends.clear()  # the recorder's list: emptied, not replaced
        if ends:
            self.recorder.log_written(ends, self.storage.finish(ends, now=self._now()))

    def _attempt(self, job: ClaimedJob) -> None:
        task = self.queue.get_task(job.task_name)
        att = Attempt(job, task)
        att.mode = MODE
        att.claimed_at = self._timing.monotonic()
        if task is None:
            exc = ConfigError(
                f"unknown task {job.task_name!r}: not registered in this process "
                "(eager mode runs jobs where they are enqueued)",
                code="unknown_task",
                field="task_name",
                value=job.task_name,
            )
            self.recorder.dead(att, Reason.UNKNOWN_TASK, error_info(exc))
            return
        if job.options:
            att.call = self.recorder.call_options(job.options)
        try:
            args, kwargs = self._serializer.loads_payload(job.payload)
        except Exception as exc:  # noqa: BLE001 - any decode failure is a bad payload
            self.recorder.dead(att, Reason.BAD_PAYLOAD, error_info(exc))
            return
        misfit = bind_error(task, args, kwargs)
        if misfit is not None:
            self.recorder.dead(att, Reason.BAD_PAYLOAD, error_info(TypeError(misfit)))
            return
        if task.takes_ctx:
            kwargs["ctx"] = self._context(att)
        try:
            self._run_body(att, task, args, kwargs)
        finally:
            if att.ctx is not None:
                att.ctx._close()

    def _run_body(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        timeout = None if att.job.timeout_ms is None else att.job.timeout_ms / 1000.0
        body = _Body()
        if task.is_async:
            call = _async_call(task, args, kwargs, timeout)
        else:
            call = _sync_call(task, args, kwargs)
        if timeout is None and not task.is_async:
            _finish(body, call)  # inline: no thread needed without a bound
        else:
            threading.Thread(
                target=_finish, args=(body, call), name="queue-core eager body", daemon=True
            ).start()
            # an async body is cancelled by its own loop at the timeout; the extra second
            # covers one that blocks its loop
            body.done.wait(timeout if not task.is_async or timeout is None else timeout + 1.0)
        if not body.done.is_set() or isinstance(body.error, _AsyncTimeout):
            self.recorder.timed_out(att)
        elif body.error is not None:
            self.recorder.fail(att, body.error)
        else:
            self.recorder.succeed_value(att, body.value)

    def _context(self, att: Attempt) -> JobContext:
        job, storage = att.job, self.storage
        hb_ms = job.heartbeat_ms

        def beat() -> bool:
            try:
                return storage.heartbeat(job.ref, now=self._now())
            except StorageError:
                return False

        ctx = JobContext(
            job_id=job.id,
            attempt=job.attempt,
            deadline=dt_from_ms(job.deadline),
            heartbeat_interval=hb_ms / 1000.0 if hb_ms else None,
            on_heartbeat=beat if hb_ms else None,
        )
        att.ctx = ctx
        return ctx


class _AsyncTimeout(Exception):
    """An async body ran past its timeout (its own event loop cancelled it)."""


def _sync_call(task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return lambda: task.func(*args, **kwargs)


def _async_call(
    task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None
) -> Any:
    async def main() -> Any:
        try:
            with anyio.fail_after(timeout) as scope:
                return await task.func(*args, **kwargs)
        except TimeoutError:
            if scope.cancelled_caught:
                raise _AsyncTimeout() from None
            raise

    return lambda: anyio.run(main)


def _finish(body: _Body, call: Any) -> None:
    try:
        body.value = call()
    except BaseException as exc:  # noqa: BLE001 - carried back to the recording path
        body.error = exc
    finally:
        body.done.set()

"""The pool of warm children for ``isolation="process"`` and its event-loop path.

A :class:`ProcessPool` keeps up to ``size`` child interpreters
(:class:`~queue_core.worker.process.children.Child`). Each child is started once (a fresh
``sys.executable``, in its own session, so it leads its own process group) and then runs
attempt after attempt; the request and the result travel over a pipe pair as pickles. At
the deadline, or when the worker cancels the attempt, the parent announces the stop,
sends SIGTERM to the child's whole process group, waits ``kill_grace`` seconds for the
group to go, then sends SIGKILL. :meth:`ProcessPool.run` returns once the group is gone
and the child is reaped, so the slot is really free. A child that was stopped or died is
not reused; the next attempt starts a new one. :meth:`ProcessPool.run_direct` runs an
attempt the same way on the calling thread (:mod:`~queue_core.worker.process.direct`).

Children are exec'd interpreters rather than ``fork``ed copies of the worker: the worker
runs an event loop and threads, which a fork would copy in an unsafe state. This is the
``spawn`` start method of :mod:`multiprocessing`, done with :mod:`subprocess` so that the
new session is created before the child runs any code (no window in which the child is
not yet a group leader) and the worker's ``__main__`` is never re-run in the child.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio

from queue_core.worker.process import direct
from queue_core.worker.process.children import POLL, Child, ChildSet, request_of
from queue_core.worker.process.deadline import BodyStart
from queue_core.worker.process.exchange import Exchange
from queue_core.worker.process.places import Places
from queue_core.worker.process.results import (
    ANSWERS,
    ProcessOutcome,
    ProcessResult,
    answered,
    unanswered,
)
from queue_core.worker.scopes import Carried

__all__ = ["ProcessPool"]

_Watch = tuple[
    Callable[[], object] | None,
    Callable[[float, str | None], object] | None,
    Callable[[], bool] | None,
    BodyStart | None,
]
"""An attempt's callbacks: heartbeat, progress, cancelled, body start (see :meth:`run`)."""


class ProcessPool:
    """Warm child processes for ``isolation="process"`` attempts.

    At most ``size`` attempts run at once (further :meth:`run` calls wait for a child).
    Children start lazily, on first need, and are reused until one is stopped or dies,
    or has answered ``max_tasks_per_child`` attempts. A child runs one attempt at a time;
    what a body leaves in its module globals is still there for the next attempt that
    child runs.

    Args:
        size: the most children alive at once (the worker's slot count is a good value).
        max_tasks_per_child: retire a child (SIGTERM to its group, as after a stop) once
            it has answered this many attempts; ``None`` (default) keeps it for good.

    Example::

        pool = ProcessPool(4)
        try:
            result = await pool.run("myapp.tasks", "resize", (path,), {}, job_id=job_id,
                                    attempt=1, timeout=30, kill_grace=10)
        finally:
            await pool.aclose()
    """

    def __init__(self, size: int, *, max_tasks_per_child: int | None = None) -> None:
        if size < 1:
            raise ValueError(f"ProcessPool size must be at least 1, got {size!r}")
        if max_tasks_per_child is not None and max_tasks_per_child < 1:
            raise ValueError(
                f"max_tasks_per_child must be at least 1 or None, got {max_tasks_per_child!r}"
            )
        self.size = size
        self.max_tasks_per_child = max_tasks_per_child
        self.children = ChildSet(max_tasks_per_child)
        """The children, shared with the direct path (real time: see :class:`ChildSet`)."""
        self._places = Places(size)

    @property
    def pids(self) -> list[int]:
        """Pids (= process group ids) of the live children, idle or busy."""
        return sorted(child.pid for child in self.children.live)

    async def _take(self) -> Child:
        while (child := self.children.pop_idle()) is not None:
            if not child.exited() and not child.eof:
                return child
            await self._discard(child, grace=0.0)
        child = Child.start()
        self.children.live.add(child)
        try:
            await child.wait_ready()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._discard(child, grace=0.0)
            raise
        return child

    async def _discard(self, child: Child, *, grace: float) -> tuple[bool, bool]:
        """Terminate ``child``'s group (if still there), reap it, close its pipes."""
        try:
            return await child.terminate(grace)
        finally:
            child.close_fds()
            self.children.live.discard(child)

    async def run(
        self,
        func_module: str,
        func_qualname: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        job_id: str,
        attempt: int,
        # Not a bound on this call: the child's deadline, after which its group is stopped
        # and the outcome is TIMED_OUT (a caller's own cancel scope also stops the group).
        timeout: float | None,  # noqa: ASYNC109
        kill_grace: float,
        heartbeat: Callable[[], object] | None = None,
        progress: Callable[[float, str | None], object] | None = None,
        heartbeat_every: float = 0.1,
        cancelled: Callable[[], bool] | None = None,
        wants_ctx: bool = False,
        execution_id: str | None = None,
        step_id: str | None = None,
        carried: Sequence[Carried] = (),
        body_start: BodyStart | None = None,
    ) -> ProcessResult:
        """Run one attempt of a sync body in a child process.

        The child imports ``func_module``, walks ``func_qualname`` (unwrapping a task
        object through its ``.fn``), sets env ``QUEUE_CORE_ATTEMPT`` to ``attempt`` and
        calls the body with ``args``/``kwargs`` (plus ``ctx=`` when ``wants_ctx``). Both
        must pickle, and so must the return value.

        Args:
            func_module: module that defines the body (``"__main__"`` loads the worker's
                main script under the name ``__mp_main__``).
            func_qualname: the body's qualified name in that module.
            args: positional arguments.
            kwargs: keyword arguments.
            job_id: the job id, for ``ctx.job_id``.
            attempt: the 1-based attempt number.
            timeout: seconds the attempt may run; ``None`` for no limit.
            kill_grace: seconds between SIGTERM and SIGKILL when the attempt is stopped.
            heartbeat: called in the worker (on the event loop; it must not block) each
                time a heartbeat message arrives from the body.
            progress: called in the worker (on the event loop; it must not block) with
                ``(fraction, message)`` for each ``ctx.progress()`` report that arrives
                from the body (checked in the child; the first at once, then at most one
                per second, the latest kept and sent before the answer).
            heartbeat_every: the child sends at most one heartbeat message per this many
                seconds (the first ``ctx.heartbeat()`` always goes through).
            cancelled: polled every 50 ms; once it returns True the attempt is stopped like
                a timeout and the outcome is ``CANCELLED``.
            wants_ctx: pass a ``ctx`` keyword
                (:class:`~queue_core.worker.process.child.ChildContext`).
            execution_id: a flow step's execution, for ``ctx.execution_id``.
            step_id: a flow step's id, for ``ctx.step_id``.
            carried: attempt scopes the child enters around the body
                (:func:`queue_core.worker.scopes.enter_carried`).
            body_start: told when the body starts, as ``timeout`` counts it (``None``
                while the child imports the body's module;
                :data:`~queue_core.worker.process.deadline.BodyStart`).

        Returns:
            How the attempt ended. Every outcome but ``RETURNED`` and ``RAISED`` means the
            child is gone (and its process group, unless ``group_gone`` is False).

        Raises:
            RuntimeError: the pool is closed.
            ChildStartError: a new child could not be started.

        If the caller is cancelled while waiting, the child's group is terminated (shielded,
        SIGTERM then SIGKILL after ``kill_grace``) before the cancellation propagates.
        """
        children = self.children
        if children.closed:
            raise RuntimeError("the process pool is closed")
        await self._places.acquire()
        try:
            if children.closed:
                raise RuntimeError("the process pool is closed")
            child = await self._take()
            request = request_of(
                func_module,
                func_qualname,
                args,
                kwargs,
                job_id=job_id,
                attempt=attempt,
                timeout=timeout,
                heartbeat_every=heartbeat_every,
                wants_ctx=wants_ctx,
                execution_id=execution_id,
                step_id=step_id,
                carried=carried,
                clock=children.clock,
            )
            watch: _Watch = (heartbeat, progress, cancelled, body_start)
            result: ProcessResult | None = None
            try:
                result = await self._attempt(child, request, timeout, kill_grace, watch)
                return result
            finally:
                if children.keep(child, result):
                    children.idle.append(child)
                elif not child.closed:
                    with anyio.CancelScope(shield=True):
                        await self._discard(child, grace=kill_grace)
        finally:
            self._places.release()

    def run_direct(
        self,
        request: tuple[Any, ...],
        *,
        timeout: float | None,
        kill_grace: float,
        heartbeat: Callable[[], object] | None,
        progress: Callable[[float, str | None], object] | None = None,
        cancelled: Callable[[], bool],
        body_start: BodyStart | None = None,
    ) -> ProcessResult:
        """Run one attempt (``request`` from
        :func:`~queue_core.worker.process.children.request_of`) in a child of this pool,
        on the calling thread (blocking); ``timeout``, ``kill_grace``, ``heartbeat``,
        ``progress``, ``cancelled`` and ``body_start`` as for :meth:`run` (``heartbeat``,
        ``progress`` and ``body_start``
        are called on this thread). See :func:`queue_core.worker.process.direct.run_direct`.

        Raises:
            RuntimeError: the pool is closed.
            ChildStartError: a new child could not be started.
        """
        return direct.run_direct(
            self.children,
            request,
            timeout=timeout,
            kill_grace=kill_grace,
            heartbeat=heartbeat,
            progress=progress,
            cancelled=cancelled,
            body_start=body_start,
        )

    async def _attempt(
        self,
        child: Child,
        request: tuple[Any, ...],
        timeout: float | None,  # noqa: ASYNC109
        kill_grace: float,
        watch: _Watch,
    ) -> ProcessResult:
        heartbeat, progress, cancelled, body_start = watch
        monotonic = self.children.clock.monotonic
        started = monotonic()
        ex = Exchange(
            child,
            heartbeat,
            cancelled,
            progress=progress,
            timeout=timeout,
            started=started,
            monotonic=monotonic,
            body_start=body_start,
        )
        await child.send(("run", request, started))
        # Most answers come within the first wait, which the deadline bounds itself; the
        # deadline's cancel scope (a timer and a scope per attempt) only for the rest.
        if not await ex.first_wait():
            timed_out = await ex.run_to_deadline()
        else:
            timed_out = ex.at_deadline
        elapsed = monotonic() - started
        if ex.failure is not None:
            raise ex.failure  # run() terminates the child on the way out
        answer = ex.answer
        if answer is None:
            child.drain()
            answer = child.take_answer()
        if answer is not None and answer[0] in ANSWERS:
            return answered(answer, child.pid, elapsed)
        why_stopped = ex.why_stopped
        if why_stopped is None and timed_out:
            why_stopped = ProcessOutcome.TIMED_OUT
        if why_stopped is None and child.stopping:
            why_stopped = ProcessOutcome.CANCELLED  # the pool was closed under us
        with anyio.CancelScope(shield=True):
            sigkill, gone = await self._discard(
                child, grace=kill_grace if why_stopped is not None else 0.0
            )
        return unanswered(why_stopped, child.status(), sigkill, gone, child.pid, elapsed)

    async def aclose(self, *, grace: float = 5.0) -> None:
        """Stop every child: SIGTERM to each group, SIGKILL after ``grace``; reap them all.

        Attempts still running end ``CANCELLED`` (their :meth:`run` returns once their
        group is gone). Calling it twice is harmless.
        """
        children = self.children
        with children.lock:
            children.closed = True
            idle = set(children.idle)
            children.idle.clear()
            held = set(children.direct)
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for child in list(children.live):
                    if child in idle:
                        tg.start_soon(self._stop_idle, child, grace)
                    elif child not in held:  # its run() closes it; we stop the group
                        tg.start_soon(self._stop_busy, child, grace)
            # A direct attempt sees the pool closed within a cancel poll and stops its
            # child itself (SIGTERM, its own kill_grace, SIGKILL).
            while children.direct:  # noqa: ASYNC110 - emptied by other threads
                await anyio.sleep(POLL)

    async def _stop_idle(self, child: Child, grace: float) -> None:
        await self._discard(child, grace=grace)

    async def _stop_busy(self, child: Child, grace: float) -> None:
        await child.terminate(grace)

    async def __aenter__(self) -> ProcessPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

"""The context a workflow function receives (SPEC §12): :class:`DurableContext`, and the
body a workflow's task runs on a worker.

A workflow function is the body of its *function step*'s job. Each attempt replays it
from its start against what storage remembers (:mod:`queue_core.app.durable_run`): a
``ctx.step`` whose result is stored returns it without calling the step again, a sleep
that is over returns, and where the function must wait -- a sleep not over, an event not
delivered, children not finished -- the attempt ends with outcome ``suspended``, spending
no attempt; the worker's slot is free until storage readies the job again.

``async def`` functions await each ``ctx`` method; a plain ``def`` function calls them
and gets their values (``ctx.run`` returns a :class:`PendingChild` either way, awaited
or passed to ``ctx.gather``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Generator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from queue_core.app.context import JobContext
from queue_core.app.durable_run import Child, Suspend, WorkflowRun, own_storage_call, retrying
from queue_core.records.durations import parse_duration, to_ms
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import LeaseRef, ms_from_dt
from queue_core.records.workflows import Suspension
from queue_core.storage.abilities import SupportsWorkflows

if TYPE_CHECKING:
    from queue_core.app.durable_run import SubFlow
    from queue_core.app.handle import HandleOwner
    from queue_core.app.task import Task
    from queue_core.rules import RetryPolicy

__all__ = ["DurableContext", "PendingChild", "Suspended", "check_event", "workflow_body"]


class Suspended(Exception):  # noqa: N818 - the attempt's end, not an error
    """Raised out of a workflow's body when its function stopped to wait: the worker
    records the attempt ``suspended`` with :attr:`suspension` (spending no attempt)."""

    def __init__(self, suspension: Suspension, now_ms: int) -> None:
        super().__init__(f"suspended ({suspension.reason})")
        self.suspension = suspension
        self.now_ms = now_ms
        """When it stopped, by storage's clock (epoch ms)."""


class PendingChild:
    """A child job or sub-execution of the function (``ctx.run`` / ``ctx.run_flow``).

    ``await child`` (async functions) or ``child.result()`` (plain ones) waits for it and
    gives its result; ``ctx.gather(*children)`` waits for several. A dead child job
    raises :class:`~queue_core.records.errors.ChildFailed`, a sub-execution that did not
    succeed :class:`~queue_core.records.errors.ExecutionFailed`.
    """

    __slots__ = ("_ctx", "_child")

    def __init__(self, ctx: DurableContext, child: Child) -> None:
        self._ctx = ctx
        self._child = child

    @property
    def step_id(self) -> str:
        """The child's step id in the execution: ``<task or flow name>#<n>``."""
        return self._child.step_id

    def __await__(self) -> Generator[Any, None, Any]:
        async def one() -> Any:
            return (await self._ctx._gather_async([self]))[0]

        return one().__await__()

    def result(self) -> Any:
        """Wait for the child and return its result (plain functions; async ones await)."""
        self._ctx._refuse_in("result", asynchronous=True)
        return self._ctx._run.gather([self._child])[0]

    def __repr__(self) -> str:
        return f"<PendingChild {self._child.step_id}>"


def _duration_ms(value: Any, name: str) -> int:
    return to_ms(parse_duration(value, field=name))


def _epoch_ms(when: Any) -> int:
    if isinstance(when, datetime):
        return ms_from_dt(when)
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        return int(round(when * 1000))
    raise ConfigError(
        f"ctx.sleep_until: invalid time {when!r} — expected epoch seconds or a datetime",
        code="invalid_option",
        field="when",
        value=when,
    )


def check_event(name: Any, key: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"invalid event name {name!r} — expected a non-empty string",
            code="invalid_option",
            field="name",
            value=name,
        )
    if key is not None and not isinstance(key, str):
        raise ConfigError(
            f"invalid event key {key!r} — expected a string or None (str(user_id), ...)",
            code="invalid_option",
            field="key",
            value=key,
        )


def _call_sync(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):  # an async step function in a plain workflow
        return asyncio.run(_awaited(value))
    return value


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


class DurableContext:
    """What a workflow function gets as its first argument (SPEC §12).

    In an ``async def`` function every method but :meth:`run` and :meth:`run_flow`
    returns an awaitable; in a plain ``def`` one they return their values.

    Attributes:
        execution_id: the workflow execution's id.
        attempt: the function step's attempt number (suspended attempts count too).
        job: the attempt's :class:`~queue_core.JobContext` (``ctx.job.cancelled``).
    """

    __slots__ = ("_run", "_async", "execution_id", "attempt", "job")

    def __init__(self, run: WorkflowRun, job: JobContext, *, asynchronous: bool) -> None:
        self._run = run
        self._async = asynchronous
        self.execution_id = run.execution_id
        self.attempt = job.attempt
        self.job = job

    def _refuse_in(self, method: str, *, asynchronous: bool) -> None:
        if self._async is asynchronous:
            mode = "an async def" if asynchronous else "a plain def"
            fix = "await it" if asynchronous else "call it without await"
            raise ConfigError(
                f"{method}() in {mode} workflow: {fix}",
                code="invalid_option",
                field=method,
            )

    # ------------------------------------------------------------------ steps

    def step(
        self,
        id: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once and keep its result: whenever the function runs
        again the stored result is returned (as it came back from the serializer) and
        ``fn`` is not called. ``fn`` may be sync or async. With ``retry``, a failure is
        retried inside this attempt by that policy before it propagates.

        Raises:
            ConfigError: ``duplicate_step`` when ``id`` was used before in this run.
            Exception: what ``fn`` raised (after ``retry``'s attempts).
        """
        key = self._run.step_key(id)
        if self._async:
            return self._step_async(key, fn, args, kwargs, retry)
        found, value = self._run.remembered(key)
        if found:
            return value
        attempt = 1
        while True:
            try:
                value = _call_sync(fn, args, kwargs)
                break
            except Exception as exc:
                pause = None if retry is None else retrying(retry, attempt, exc)
                if pause is None:
                    raise
                time.sleep(pause)
                attempt += 1
        return self._run.keep(key, value)

    async def _step_async(
        self,
        key: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
    ) -> Any:
        from queue_core.app._aio import run_sync, sleep

        found, value = self._run.remembered(key)
        if found:
            return value
        attempt = 1
        while True:
            try:
                if inspect.iscoroutinefunction(fn):
                    value = await fn(*args, **kwargs)
                else:
                    value = await run_sync(_call_sync, fn, args, kwargs)
                break
            except Exception as exc:
                pause = None if retry is None else retrying(retry, attempt, exc)
                if pause is None:
                    raise
                await sleep(pause)
                attempt += 1
        return await run_sync(self._run.keep, key, value)

    # ------------------------------------------------------------------ time

    def sleep(self, duration: float | str | timedelta) -> Any:
        """A durable timer: the attempt ends ``suspended`` (its slot is freed) and the
        function resumes on any worker at the wake time, never earlier. A sleep already
        over when the function reaches it again returns at once.

        Raises:
            ConfigError: ``invalid_duration`` for a bad duration.
        """
        ms = _duration_ms(duration, "duration")
        return self._now_or_later(lambda: self._run.sleep_until(None, ms))

    def sleep_until(self, when: float | datetime) -> Any:
        """Like :meth:`sleep`, until ``when`` (epoch seconds or a datetime); a time
        already past returns at once."""
        wake = _epoch_ms(when)
        return self._now_or_later(lambda: self._run.sleep_until(wake, None))

    def wait_for_event(
        self,
        name: str,
        key: str | None = None,
        timeout: float | str | timedelta | None = None,
    ) -> Any:
        """The ``data`` of the first event ``name`` (with ``key``, when given) sent after
        the function first reached this wait -- also one sent while no worker ran.

        Raises:
            EventTimeout: no such event came within ``timeout`` (raised again, at the same
                wait, whenever the function is replayed).
            ConfigError: a bad name, key or timeout.
        """
        check_event(name, key)
        ms = None if timeout is None else _duration_ms(timeout, "timeout")
        return self._now_or_later(lambda: self._run.wait_for_event(name, key, ms))

    def _now_or_later(self, call: Callable[[], Any]) -> Any:
        if not self._async:
            return call()

        async def later() -> Any:
            return call()

        return later()

    # ------------------------------------------------------------------ children

    def run(self, task: Task[Any, Any], *args: Any, **kwargs: Any) -> PendingChild:
        """Start a child job of ``task`` (an existing task, with its own options) with
        these arguments: it is stored when the function next waits (with ``await``,
        ``.result()`` or :meth:`gather`) -- a child never waited for is stored when the
        function returns and runs on its own. The function's slot is free while it
        waits for children.

        Raises:
            TypeError: the arguments do not fit ``task``'s body.
            SerializationError: an argument cannot be serialized.
        """
        return PendingChild(self, self._run.run(task, args, kwargs))

    def run_flow(self, flow: SubFlow, input: Any = None) -> PendingChild:
        """Start an execution of ``flow`` (a :class:`~queue_core.flows.api.Flow`) as a
        child, when the function first waits for it; its result is its ``result()``
        (``{step id: result}``). The workflow's deadline and cancel reach it."""
        return PendingChild(self, self._run.run_flow(flow, input))

    def gather(self, *children: PendingChild) -> Any:
        """Wait for every child and return their results in order. The function is
        suspended until the last has ended; then a failed child raises
        (:class:`~queue_core.records.errors.ChildFailed`, the first in order)."""
        for c in children:
            if not isinstance(c, PendingChild):
                raise ConfigError(
                    f"ctx.gather: {c!r} is not a child — expected what ctx.run / "
                    "ctx.run_flow return",
                    code="invalid_option",
                    field="children",
                    value=c,
                )
        if self._async:
            return self._gather_async(list(children))
        return self._run.gather([c._child for c in children])

    async def _gather_async(self, children: list[PendingChild]) -> list[Any]:
        from queue_core.app._aio import run_sync

        run, kids = self._run, [c._child for c in children]
        if any(k.start is not None for k in kids):
            await run_sync(run.start_flows, kids)
        if not run.finished(kids):
            run.wait_children(kids)
        return await run_sync(run.values, kids)

    # ------------------------------------------------------------------ the attempt

    @property
    def cancelled(self) -> bool:
        """``True`` once the execution was cancelled or this attempt lost its lease."""
        return self.job.cancelled

    def heartbeat(self) -> None:
        """``ctx.heartbeat()`` of the attempt (for workflows with ``heartbeat``)."""
        self.job.heartbeat()

    def __repr__(self) -> str:
        return f"DurableContext(execution_id={self.execution_id!r}, attempt={self.attempt})"


# --------------------------------------------------------------------------- the body


def load_run(owner: HandleOwner, ctx: JobContext) -> WorkflowRun:
    """Read the execution for this attempt (one storage read)."""
    storage = owner.storage()
    if (
        not isinstance(storage, SupportsWorkflows)
        or ctx.execution_id is None
        or ctx.lease_token is None
        or ctx.started_at is None
    ):
        raise ConfigError(
            "a workflow runs on a worker, as the function step of an execution started by "
            "workflow.start(...) on a storage with SupportsWorkflows",
            code="unsupported",
            field="workflow",
        )
    with own_storage_call():
        state = storage.workflow_state(ctx.execution_id)
    if state is None:
        raise ConfigError(
            f"workflow execution {ctx.execution_id} is gone",
            code="invalid_option",
            field="execution_id",
            value=ctx.execution_id,
        )
    ref = LeaseRef(ctx.job_id, ctx.attempt, ctx.lease_token)
    return WorkflowRun(
        storage=storage,
        owner=owner,
        state=state,
        ref=ref,
        started_at=ctx.started_at,
        t0=ctx.started_mono,
        slack_ms=ctx.started_slack_ms,
    )


def _end(run: WorkflowRun, value: Any) -> Any:
    leftover = run.leftover()
    if leftover is not None:
        raise Suspended(leftover, run.now())
    return value


def workflow_body(owner: HandleOwner, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The body of a workflow's task: loads the run, calls ``fn(DurableContext, *args,
    **kwargs)``, turns a suspension into :class:`Suspended`. Its signature is ``fn``'s
    without the first parameter, plus ``ctx`` (so a call that does not fit is refused at
    ``start()`` and dead-lettered ``bad_payload`` on a worker)."""
    if inspect.iscoroutinefunction(fn):

        async def body(*args: Any, ctx: JobContext = JobContext.INJECTED, **kwargs: Any) -> Any:
            from queue_core.app._aio import run_sync

            run = await run_sync(load_run, owner, ctx)
            try:
                value = await fn(DurableContext(run, ctx, asynchronous=True), *args, **kwargs)
            except Suspend as stop:
                raise Suspended(stop.suspension, run.now()) from None
            return _end(run, value)

        wrapped: Callable[..., Any] = body
    else:

        def plain(*args: Any, ctx: JobContext = JobContext.INJECTED, **kwargs: Any) -> Any:
            run = load_run(owner, ctx)
            try:
                value = fn(DurableContext(run, ctx, asynchronous=False), *args, **kwargs)
            except Suspend as stop:
                raise Suspended(stop.suspension, run.now()) from None
            return _end(run, value)

        wrapped = plain
    names = ("__module__", "__name__", "__qualname__", "__doc__")
    functools.update_wrapper(wrapped, fn, assigned=names, updated=())
    wrapped.__durable__ = True  # type: ignore[attr-defined]  # its job carries the call
    wrapped.__signature__ = _body_signature(fn)  # type: ignore[attr-defined]
    return wrapped


def _body_signature(fn: Callable[..., Any]) -> inspect.Signature:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ConfigError(
            f"workflow {getattr(fn, '__qualname__', fn)!r}: its first parameter receives the "
            "DurableContext — declare it as `def f(ctx: DurableContext, ...)`",
            code="invalid_option",
            field="workflow",
            value=getattr(fn, "__qualname__", repr(fn)),
        )
    rest = [p for p in params[1:] if p.name != "ctx"]
    ctx = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, default=JobContext.INJECTED)
    keyword = [p for p in rest if p.kind is inspect.Parameter.VAR_KEYWORD]
    others = [p for p in rest if p.kind is not inspect.Parameter.VAR_KEYWORD]
    return sig.replace(parameters=[*others, ctx, *keyword])

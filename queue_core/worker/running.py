"""The attempt runner: async bodies on the loop, sync ones in body threads or children.

The claim loop hands each claimed attempt to the :class:`Runner`, which runs its body and
tells the :class:`~queue_core.worker.recording.Recorder` how it ended: async bodies run
on the event loop under their deadline (a task each); plain sync bodies on the runner's
:class:`~queue_core.worker.threads.BodyThreads`, whose ends come back to
:meth:`Runner._thread_done` on the loop; process-isolated bodies through its
:class:`~queue_core.worker.process_runs.ProcessRuns`. Jobs with per-call options and
the other flow steps are prepared on the loop (:meth:`Runner._run`); a code step's sync
body reads its inputs on its body thread (:meth:`Runner.start_step_thread`).

Before a body runs, its payload is decoded and its arguments are bound to the task's
signature; a payload that does not decode, or arguments that no longer fit (a deploy
changed the signature), dead-letter the job at once with reason ``bad_payload``.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from anyio import to_thread

from queue_core.app.context import JobContext
from queue_core.app.steps.names import FILE_STEP_TASKS
from queue_core.app.task import Task
from queue_core.records.errors import SerializationError, StorageUnavailable
from queue_core.records.jobs import ClaimedJob, Reason, dt_from_ms
from queue_core.storage.abilities import SupportsStepInputsBatch
from queue_core.storage.protocol import Storage
from queue_core.worker.durable import carries_payload
from queue_core.worker.flowsteps import step_call
from queue_core.worker.heartbeats import Heartbeats
from queue_core.worker.listeners import Listeners
from queue_core.worker.process_runs import ProcessRuns
from queue_core.worker.progress import ProgressWriter
from queue_core.worker.recording import Recorder, error_info
from queue_core.worker.scopes import scoped, scoped_async
from queue_core.worker.slots import Attempt
from queue_core.worker.state import RunState
from queue_core.worker.threads import BodyThreads
from queue_core.worker.timing import Timing
from queue_core.worker.watchdog import deadline_of

if TYPE_CHECKING:
    from queue_core.app.serializer import Serializer
    from queue_core.app.steps.gate import StepGate
    from queue_core.storage.flows import StepInputs

__all__ = ["Decoded", "Runner", "bind_error", "signature_of"]

Decoded = tuple[tuple[Any, ...], dict[str, Any]]


def signature_of(task: Task[Any, Any]) -> inspect.Signature | None:
    """The body's signature without the injected ``ctx`` (``None``: not inspectable)."""
    try:
        sig = inspect.signature(task.func)
    except (TypeError, ValueError):
        return None
    if task.takes_ctx:
        sig = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "ctx"])
    return sig


_FITS_KEPT = 4096
"""Call shapes whose fit is remembered (all forgotten past this many)."""
_INPUTS_KEPT = 4096
"""Prefetched step inputs kept at most (all forgotten past this many)."""


def bind_error(task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The message for arguments that do not bind to ``task``'s body, else ``None``."""
    sig = signature_of(task)
    if sig is None:
        return None
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        name = getattr(task.func, "__name__", task.name)
        plain = sig.replace(
            parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
            return_annotation=sig.empty,
        )
        which = "" if name == task.name else f" (task {task.name})"
        return f"arguments no longer fit {name}{plain}{which}: {str(exc).removeprefix('got an ')}"
    return None


class _Unbuilt(Exception):
    """A step's call could not be built (:meth:`Runner._step_kwargs`): its inputs could
    not be read (``unavailable``: storage was) or do not bind."""

    def __init__(self, cause: BaseException, *, unavailable: bool = False) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.unavailable = unavailable

    def record(self, recorder: Recorder, att: Attempt) -> None:
        """End ``att``: queued again at once (storage), or dead-lettered ``bad_payload``."""
        if self.unavailable:
            recorder.unavailable(att, error_info(self.cause))
        else:
            recorder.dead(att, Reason.BAD_PAYLOAD, error_info(self.cause))


class Runner:
    """Starts bodies and tells the recorder how they ended.

    Made on the run's event loop, inside its task group ``tg`` (async bodies and the
    jobs prepared on the loop are tasks of it). It owns the body threads (their ends
    are delivered to it, in batches between ``on_delivery``'s two calls) and the
    process-isolated attempts.
    """

    def __init__(
        self,
        *,
        run: RunState,
        recorder: Recorder,
        heartbeats: Heartbeats,
        progress: ProgressWriter,
        listeners: Listeners,
        timing: Timing,
        storage: Storage,
        serializer: Serializer,
        tasks: dict[str, Task[Any, Any]],
        gate: StepGate,
        isolation: str,
        max_tasks_per_child: int | None,
        limiter: anyio.CapacityLimiter,
        tg: anyio.abc.TaskGroup,
        on_delivery: tuple[Callable[[], None], Callable[[], None]],
    ) -> None:
        self.run = run
        self.recorder = recorder
        self.heartbeats = heartbeats
        self.progress = progress
        """Writes the bodies' ``ctx.progress`` reports (SPEC §13)."""
        self.listeners = listeners
        self.timing = timing
        self.storage = storage
        self.serializer = serializer
        self.tasks = tasks
        """The queue's tasks, plus the ones ``type: script`` and ``type: http`` flow
        steps run with."""
        self.gate = gate
        """The script and http steps this worker's operator allows."""
        self.isolation = isolation
        """The default isolation of sync bodies whose task does not set one."""
        self.limiter = limiter
        self.tg = tg
        self.threads = BodyThreads(self._thread_done, on_delivery)
        self.process = ProcessRuns(
            size=run.table.slots,
            max_tasks_per_child=max_tasks_per_child,
            recorder=recorder,
            heartbeats=heartbeats,
            progress=progress,
            listeners=listeners,
            timing=timing,
            threads=self.threads,
        )
        self._fits: dict[tuple[int, bool, int, tuple[str, ...]], bool] = {}
        """Per body, ``ctx`` injection and call shape: whether such a call binds."""
        self._specs: dict[str, Any] = {}
        """Flow definitions (``FlowSpec``) read for script and http steps, by spec hash."""
        self._inputs: dict[tuple[str, int], StepInputs] = {}
        """Step inputs read with their claim (:meth:`prefetch`), by (job id, attempt);
        each taken once by the attempt's call."""

    async def aclose(self) -> None:
        """After the run: let idle body threads end, stop the children of the pool."""
        self.threads.close()
        await self.process.aclose()

    def isolation_of(self, task: Task[Any, Any]) -> str:
        """The isolation a sync body of ``task`` runs with, before per-call overrides."""
        return task.isolation if task.isolation_explicit else self.isolation

    # ------------------------------------------------------------------ payloads

    def misfit(
        self, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TypeError | None:
        """Why ``args``/``kwargs`` no longer bind to ``task``'s body, or ``None``.

        Binding depends only on the body and the call's shape (how many positional
        arguments, which keywords), so whether it fits is kept per body and shape: one
        dict lookup per job, also for the many step tasks a flow makes of one function.
        """
        shape = (id(task.func), task.takes_ctx, len(args), tuple(kwargs))
        try:
            fits = self._fits[shape]
        except KeyError:
            why = bind_error(task, args, kwargs)
            if len(self._fits) >= _FITS_KEPT:
                self._fits.clear()
            self._fits[shape] = fits = why is None
            return None if why is None else TypeError(why)
        return None if fits else TypeError(bind_error(task, args, kwargs) or "")

    def decode(self, att: Attempt, task: Task[Any, Any]) -> Decoded | None:
        """The body's arguments, or ``None`` after dead-lettering a bad payload."""
        try:
            args, kwargs = self.serializer.loads_payload(att.job.payload)
        except Exception as exc:  # noqa: BLE001 - any decode failure is a bad payload
            self.recorder.dead(att, Reason.BAD_PAYLOAD, error_info(exc))
            return None
        misfit = self.misfit(task, args, kwargs)
        if misfit is not None:
            self.recorder.dead(att, Reason.BAD_PAYLOAD, error_info(misfit))
            return None
        return args, kwargs

    async def _step_decode(self, att: Attempt, task: Task[Any, Any]) -> Decoded | None:
        """A flow step's arguments (:meth:`_step_kwargs` in a thread); ``None`` after
        ending an attempt whose call cannot be built."""
        try:
            kwargs = await to_thread.run_sync(self._step_kwargs, att, task, limiter=self.limiter)
        except _Unbuilt as exc:
            exc.record(self.recorder, att)
            return None
        return (), kwargs

    def _step_kwargs(self, att: Attempt, task: Task[Any, Any]) -> dict[str, Any]:
        """A flow step's keyword arguments, built from storage (``get_step_inputs``) by
        parameter name (blocking: a thread's).

        Raises:
            _Unbuilt: the inputs could not be read, or do not bind to the body.
        """
        job = att.job
        try:
            kwargs = step_call(
                self.storage, job, task.signature, self.serializer.loads_result,
                self._specs, self.gate, self._inputs.pop((job.id, job.attempt), None),
            )  # fmt: skip
        except StorageUnavailable as exc:  # a storage fault is never a bad payload
            raise _Unbuilt(exc, unavailable=True) from exc
        except Exception as exc:  # noqa: BLE001 - the step's call cannot be built
            raise _Unbuilt(exc) from exc
        flow = getattr(kwargs.get("call"), "flow", None)  # a script or http step's call
        if flow is not None:
            att.label = f"{flow}.{job.step_id}"
        misfit = self.misfit(task, (), kwargs)
        if misfit is not None:
            raise _Unbuilt(misfit)
        return kwargs

    # ------------------------------------------------------------------ starts

    def spawn(self, att: Attempt) -> None:
        """Run ``att`` as a task of the loop (async bodies, per-call options, flow steps)."""
        self.tg.start_soon(self._run, att)

    def start_thread(
        self, att: Attempt, task: Task[Any, Any], decoded: Decoded | None = None
    ) -> None:
        """Hand a sync body to a body thread (its payload decoded here unless given)."""
        if decoded is None:
            decoded = self.decode(att, task)
            if decoded is None:
                self.run.free(att)
                return
        args, kwargs = decoded
        if task.takes_ctx:
            kwargs["ctx"] = self.context(att, loop=False)
        att.deadline = deadline_of(att, self.timing.monotonic())  # from the body's start
        listeners = self.listeners.all
        func = scoped(listeners, att.job, task.func) if listeners else task.func
        dumps = self.serializer.dumps_result
        self.threads.submit(att, lambda: dumps(func(*args, **kwargs)))

    def prefetch(self, jobs: Sequence[ClaimedJob]) -> None:
        """On the claim thread: the inputs of the code steps among ``jobs`` that start on
        a body thread (:meth:`direct_step`), in one read when the storage has
        ``SupportsStepInputsBatch``, kept for their calls. A read that fails keeps
        nothing: each call reads its own (and reports the fault), as without it."""
        steps = [
            j for j in jobs
            if j.execution_id is not None and j.step_id is not None
            and (task := self.tasks.get(j.task_name)) is not None and self.direct_step(j, task)
        ]  # fmt: skip
        if not steps or not isinstance(self.storage, SupportsStepInputsBatch):
            return  # (a batch of plain jobs costs no ability check)
        try:
            got = self.storage.get_step_inputs_batch([(j.execution_id or "", j.step_id or "")
                                                      for j in steps])  # fmt: skip
        except Exception:  # noqa: BLE001 - each call reads its own and reports the fault
            return
        if len(self._inputs) > _INPUTS_KEPT:  # calls that never came (a late start)
            self._inputs.clear()
        for j, inputs in zip(steps, got, strict=True):
            if inputs is not None:
                self._inputs[j.id, j.attempt] = inputs

    def direct_step(self, job: ClaimedJob, task: Task[Any, Any]) -> bool:
        """Whether step ``job`` starts with :meth:`start_step_thread`: a code step's sync,
        thread-isolated body without per-call options (a workflow's function, script and
        http steps and the rest go through :meth:`spawn`)."""
        return not (
            task.is_async
            or job.options
            or job.task_name in FILE_STEP_TASKS
            or carries_payload(job, task)
            or self.isolation_of(task) != "thread"
        )

    def start_step_thread(self, att: Attempt, task: Task[Any, Any]) -> None:
        """A code step's sync body on a body thread that first reads the step's inputs
        (``get_step_inputs``) itself: no hop through the loop and ``to_thread``. A call
        that cannot be built ends as on the loop (:class:`_Unbuilt`)."""
        ctx = self.context(att, loop=False) if task.takes_ctx else None
        listeners = self.listeners.all
        func = scoped(listeners, att.job, task.func) if listeners else task.func
        dumps, timing = self.serializer.dumps_result, self.timing

        def call() -> Any:
            kwargs = self._step_kwargs(att, task)
            if ctx is not None:
                kwargs["ctx"] = ctx
            att.deadline = deadline_of(att, timing.monotonic())  # from the body's start
            return dumps(func(**kwargs))

        self.threads.submit(att, call)

    def start_process(self, att: Attempt, task: Task[Any, Any]) -> None:
        """Hand a plain process-isolated attempt to a body thread."""
        decoded = self.decode(att, task)
        if decoded is None:
            self.run.free(att)
            return
        self.process.start(att, task, *decoded)

    # ------------------------------------------------------------------ run

    async def _run(self, att: Attempt) -> None:
        task = att.task
        assert task is not None
        run = self.run
        try:
            if att.job.options:
                try:
                    att.call = self.recorder.call_options(att.job.options)
                except SerializationError as exc:
                    self.recorder.dead(att, Reason.BAD_PAYLOAD, error_info(exc))
                    run.free(att)
                    return
            if task.is_async:
                att.mode = "async"
            if att.job.execution_id is None or carries_payload(att.job, task):  # workflows
                decoded = self.decode(att, task)
            else:
                decoded = await self._step_decode(att, task)
            if decoded is None:
                run.free(att)
                return
            if not await self._run_decoded(att, task, decoded):
                return  # a thread body: the slot is freed when it reports back
        except BaseException:
            run.free(att)
            raise
        if att.ctx is not None:
            att.ctx._close()
        run.free(att)

    async def _run_decoded(self, att: Attempt, task: Task[Any, Any], decoded: Decoded) -> bool:
        """Run the body; ``False`` when it was handed to a body thread (still running)."""
        args, kwargs = decoded
        if task.is_async:
            if task.takes_ctx:
                kwargs["ctx"] = self.context(att, loop=True)
            await self._run_async(att, task, args, kwargs)
            return True
        iso = att.call.isolation if att.call and att.call.isolation else None
        if (iso or self.isolation_of(task)) == "process":
            await self.process.run(att, task, args, kwargs)
            return True
        self.start_thread(att, task, decoded)
        return False

    def _thread_done(self, att: Attempt, ok: bool, value: Any) -> None:
        """On the loop: a sync body returned (``ok``) or raised (``value``)."""
        recorder = self.recorder
        try:
            if att.ended:  # timed out (stuck), lease lost or released meanwhile
                return
            if not ok and isinstance(value, _Unbuilt):  # a step's call was not built
                value.record(recorder, att)
            elif att.mode == "process":  # a process attempt on a body thread
                if ok:
                    self.process.end(att, value)
                else:
                    recorder.fail(att, value)
            elif att.stop_requested():
                recorder.stopped_end(att)
            elif ok:
                recorder.succeed(att, value)
            elif isinstance(value, SerializationError):  # the result cannot be carried
                recorder.dead(att, Reason.FATAL, error_info(value))
            else:
                recorder.fail(att, value)
        finally:
            if att.ctx is not None:
                att.ctx._close()
            self.run.free(att)

    # ------------------------------------------------------------------ context

    def context(self, att: Attempt, *, loop: bool) -> JobContext:
        """``att``'s ``ctx``, made as its body starts; its heartbeats queued for the
        writer (``loop``) or written by the body's thread. ``ctx.deadline`` is when the
        worker stops the body (:func:`deadline_of` from now, on the worker's clock), also
        for a job claimed ahead of a free slot (storage gave it no deadline then)."""
        job = att.job
        hb_ms = job.heartbeat_ms
        sink: Callable[[], bool] | None = None
        if hb_ms:
            sink = self.heartbeats.sink(att, loop=loop)
        timing = self.timing
        now = timing.monotonic()
        stop = deadline_of(att, now)
        deadline = None if stop is None else timing.now_ms() + math.ceil(1000 * (stop - now))
        # storage's clock as the body starts: its stamp at the claim, plus, for a job held
        # ahead of a free slot, the time since that claim began (SPEC §8, §12: a held
        # workflow's sleep would otherwise come back early by the time it was held)
        started_at, began, slack = job.started_at, att.claim_began, 0
        mono = timing.pacing.monotonic()
        if began:  # the stamp is within the claim call: the clock may be ahead by its length
            started_at += math.ceil(1000 * max(0.0, mono - began))
            slack = math.ceil(1000 * att.claim_took) + 1
        ctx = JobContext(
            job_id=job.id,
            attempt=job.attempt,
            deadline=dt_from_ms(deadline),
            execution_id=job.execution_id,
            step_id=job.step_id,
            heartbeat_interval=hb_ms / 1000.0 if hb_ms else None,
            on_heartbeat=sink,
            lease_token=job.lease_token,
            started_at=started_at,
            on_progress=functools.partial(self.progress.report, att.ref),
            started_mono=mono,
            started_slack_ms=slack,
        )
        att.ctx = ctx
        return ctx

    # ------------------------------------------------------------------ async bodies

    async def _run_async(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Run an async body. The watchdog ends it at its deadline on the worker's clock;
        the cancel scope below also ends it on the loop's timer, so that a short timeout
        is met exactly with the system clock."""
        recorder = self.recorder
        now = self.timing.monotonic()
        att.deadline = deadline = deadline_of(att, now)  # from the body's start
        timeout = None if deadline is None else max(0.0, deadline - now)
        with anyio.CancelScope() as scope:
            att.scope = scope
            if att.stop_requested():
                scope.cancel()
            try:
                with anyio.fail_after(timeout) as deadline_scope:
                    body = scoped_async(self.listeners.all, att.job, task.func)
                    value = await body(*args, **kwargs)
            except TimeoutError as exc:
                if deadline_scope.cancelled_caught:
                    recorder.timed_out(att)
                else:
                    recorder.fail(att, exc)
                return
            except Exception as exc:  # noqa: BLE001 - every body error is recorded
                recorder.fail(att, exc)
                return
            if att.stop_requested():
                recorder.stopped_end(att)
                return
            recorder.succeed_value(att, value)
        if scope.cancelled_caught:
            recorder.stopped_end(att)

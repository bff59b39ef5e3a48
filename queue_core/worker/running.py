"""Running bodies: async on the loop, sync in body threads or in child processes.

Before a body runs, its payload is decoded and its arguments are bound to the task's
signature; a payload that does not decode, or arguments that no longer fit (a deploy
changed the signature), dead-letter the job at once with reason ``bad_payload``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio
from anyio import to_thread

from queue_core.context import JobContext
from queue_core.errors import LeaseLost, SerializationError, StorageError
from queue_core.model import ErrorInfo, Outcome, Reason, dt_from_ms
from queue_core.policy import decide
from queue_core.task import DEFAULT_KILL_GRACE, Task
from queue_core.worker.flowsteps import step_call
from queue_core.worker.log import log
from queue_core.worker.recording import error_info
from queue_core.worker.scopes import carried_scopes, scoped, scoped_async
from queue_core.worker.services import Services, deadline_of
from queue_core.worker.slots import Attempt

__all__ = ["Running", "signature_of"]

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


def _bind_error(task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
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


class Running(Services):
    """Starts bodies and turns how they ended into attempt ends."""

    def _isolation(self, task: Task[Any, Any]) -> str:
        """The isolation a sync body of ``task`` runs with, before per-call overrides."""
        return task.isolation if task.isolation_explicit else self.isolation

    # ------------------------------------------------------------------ payloads

    def _misfit(
        self, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> TypeError | None:
        """Why ``args``/``kwargs`` no longer bind to ``task``'s body, or ``None``.

        Binding depends only on the call's shape (how many positional arguments, which
        keywords), so the answer is kept per shape: one dict lookup per job.
        """
        shape = (task.name, len(args), tuple(kwargs))
        try:
            why = self._fits[shape]
        except KeyError:
            why = self._fits[shape] = _bind_error(task, args, kwargs)
            if len(self._fits) > _FITS_KEPT:
                self._fits.clear()
        return None if why is None else TypeError(why)

    def _decode(self, att: Attempt, task: Task[Any, Any]) -> Decoded | None:
        """The body's arguments, or ``None`` after dead-lettering a bad payload."""
        try:
            args, kwargs = self._serializer.loads_payload(att.job.payload)
        except Exception as exc:  # noqa: BLE001 - any decode failure is a bad payload
            self._dead(att, Reason.BAD_PAYLOAD, error_info(exc))
            return None
        misfit = self._misfit(task, args, kwargs)
        if misfit is not None:
            self._dead(att, Reason.BAD_PAYLOAD, error_info(misfit))
            return None
        return args, kwargs

    async def _step_decode(self, att: Attempt, task: Task[Any, Any]) -> Decoded | None:
        """A flow step's arguments, built from storage (``get_step_inputs``) by
        parameter name; ``None`` after dead-lettering a call that cannot be built."""
        job = att.job
        try:
            kwargs: dict[str, Any] = await to_thread.run_sync(
                step_call,
                self.storage,
                job,
                task.signature,
                self._serializer.loads_result,
                self._specs,
                limiter=self._io,
            )
        except Exception as exc:  # noqa: BLE001 - the step's call cannot be built
            self._dead(att, Reason.BAD_PAYLOAD, error_info(exc))
            return None
        misfit = self._misfit(task, (), kwargs)
        if misfit is not None:
            self._dead(att, Reason.BAD_PAYLOAD, error_info(misfit))
            return None
        return (), kwargs

    # ------------------------------------------------------------------ run

    async def _run(self, att: Attempt) -> None:
        task = att.task
        assert task is not None
        try:
            if att.job.options:
                try:
                    att.call = self._call_options(att.job.options)
                except SerializationError as exc:
                    self._dead(att, Reason.BAD_PAYLOAD, error_info(exc))
                    self._free(att)
                    return
            if task.is_async:
                att.mode = "async"
            if att.job.execution_id is None:
                decoded = self._decode(att, task)
            else:
                decoded = await self._step_decode(att, task)
            if decoded is None:
                self._free(att)
                return
            if not await self._run_decoded(att, task, decoded):
                return  # a thread body: the slot is freed when it reports back
        except BaseException:
            self._free(att)
            raise
        if att.ctx is not None:
            att.ctx._close()
        self._free(att)

    async def _run_decoded(self, att: Attempt, task: Task[Any, Any], decoded: Decoded) -> bool:
        """Run the body; ``False`` when it was handed to a body thread (still running)."""
        args, kwargs = decoded
        if task.is_async:
            if task.takes_ctx:
                kwargs["ctx"] = self._context(att, loop=True)
            await self._run_async(att, task, args, kwargs)
            return True
        iso = att.call.isolation if att.call and att.call.isolation else None
        if (iso or self._isolation(task)) == "process":
            att.mode = "process"
            await self._run_process(att, task, args, kwargs)
            return True
        self._start_thread(att, task, decoded)
        return False

    def _start_thread(self, att: Attempt, task: Task[Any, Any], decoded: Decoded | None) -> None:
        if decoded is None:
            decoded = self._decode(att, task)
            if decoded is None:
                self._free(att)
                return
        args, kwargs = decoded
        if task.takes_ctx:
            kwargs["ctx"] = self._context(att, loop=False)
        att.deadline = deadline_of(att)
        func = scoped(self._listeners, att.job, task.func) if self._listeners else task.func
        dumps = self._serializer.dumps_result
        self._threads.submit(att, lambda: dumps(func(*args, **kwargs)))

    def _thread_done(self, att: Attempt, ok: bool, value: Any) -> None:
        """On the loop: a sync body returned (``ok``) or raised (``value``)."""
        try:
            if att.ended:  # timed out (stuck), lease lost or released meanwhile
                return
            if att.mode == "process":  # started directly (process_start.py)
                if ok:
                    self._process_end(att, value)
                else:
                    self._fail(att, value)
            elif att.stop_requested():
                self._stopped_end(att)
            elif ok:
                self._succeed(att, value)
            elif isinstance(value, SerializationError):  # the result cannot be carried
                self._dead(att, Reason.FATAL, error_info(value))
            else:
                self._fail(att, value)
        finally:
            if att.ctx is not None:
                att.ctx._close()
            self._free(att)

    def _free(self, att: Attempt) -> None:
        self._table.remove(att)
        if self._heartbeats:  # hashing a LeaseRef is a Python call: skip it when empty
            self._heartbeats.pop(att.ref, None)
        self._processed += 1
        self._slot_wake.set()

    # ------------------------------------------------------------------ context

    def _context(self, att: Attempt, *, loop: bool) -> JobContext:
        job = att.job
        hb_ms = job.heartbeat_ms
        sink: Callable[[], bool] | None = None
        if hb_ms:
            sink = self._queue_heartbeat(att) if loop else self._direct_heartbeat(att)
        ctx = JobContext(
            job_id=job.id,
            attempt=job.attempt,
            deadline=dt_from_ms(job.deadline),
            execution_id=job.execution_id,
            step_id=job.step_id,
            heartbeat_interval=hb_ms / 1000.0 if hb_ms else None,
            on_heartbeat=sink,
        )
        att.ctx = ctx
        return ctx

    def _direct_heartbeat(self, att: Attempt) -> Callable[[], bool]:
        storage, ref, clock = self.storage, att.ref, self._timing.clock

        def beat() -> bool:
            att.last_beat = clock.monotonic()
            try:
                return storage.heartbeat(ref)
            except LeaseLost:
                att.lease_lost = True
                return True
            except StorageError as exc:
                if not self._outage.failed("heartbeat", exc):
                    log.warning("heartbeat of job %s failed (%s)", ref.job_id, exc)
                return att.stop_requested()

        return beat

    def _queue_heartbeat(self, att: Attempt) -> Callable[[], bool]:
        clock = self._timing.clock

        def beat() -> bool:
            att.last_beat = clock.monotonic()
            self._heartbeats[att.ref] = att
            self._hb_wake.set()
            return att.stop_requested()

        return beat

    # ------------------------------------------------------------------ async bodies

    async def _run_async(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Run an async body. The watchdog ends it at its deadline on the worker's clock;
        the cancel scope below also ends it on the loop's timer, so that a short timeout
        is met exactly with the system clock."""
        att.deadline = deadline = deadline_of(att)
        timeout = None if deadline is None else max(0.0, deadline - self._timing.monotonic())
        with anyio.CancelScope() as scope:
            att.scope = scope
            if att.stop_requested():
                scope.cancel()
            try:
                with anyio.fail_after(timeout) as deadline_scope:
                    value = await scoped_async(self._listeners, att.job, task.func)(*args, **kwargs)
            except TimeoutError as exc:
                if deadline_scope.cancelled_caught:
                    self._timed_out(att)
                else:
                    self._fail(att, exc)
                return
            except Exception as exc:  # noqa: BLE001 - every body error is recorded
                self._fail(att, exc)
                return
            if att.stop_requested():
                self._stopped_end(att)
                return
            self._succeed_value(att, value)
        if scope.cancelled_caught:
            self._stopped_end(att)

    # ------------------------------------------------------------------ process bodies

    async def _run_process(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """``isolation="process"``: the attempt runs in a child process group."""
        from queue_core.worker.process_start import process_pool

        pool = process_pool(self)
        job = att.job
        kill_grace = task.kill_grace
        if att.call is not None and att.call.kill_grace is not None:
            kill_grace = att.call.kill_grace
        att.deadline = deadline = deadline_of(att)
        res = await pool.run(
            task.func.__module__,
            task.func.__qualname__,
            args,
            kwargs,
            job_id=job.id,
            attempt=job.attempt,
            timeout=None if deadline is None else max(0.0, deadline - self._timing.monotonic()),
            kill_grace=kill_grace if kill_grace is not None else DEFAULT_KILL_GRACE,
            heartbeat=self._queue_heartbeat(att) if job.heartbeat_ms else None,
            heartbeat_every=(job.heartbeat_ms or 3000) / 3000.0,
            cancelled=att.stop_requested,
            wants_ctx=task.takes_ctx,
            execution_id=job.execution_id,
            step_id=job.step_id,
            carried=carried_scopes(self._listeners, job),
        )
        if not att.ended:
            self._process_end(att, res)

    def _process_end(self, att: Attempt, res: Any) -> None:
        from queue_core.worker.process import ProcessOutcome

        outcome = res.outcome
        if outcome is ProcessOutcome.RETURNED:
            self._succeed_value(att, res.value)
        elif outcome is ProcessOutcome.RAISED and res.error is not None:
            # classified like any body error (per-call overrides included), recorded
            # with the child's own traceback
            self._fail(att, res.error.exception, info=res.error_info())
        elif outcome is ProcessOutcome.TIMED_OUT:
            self._timed_out(att)
        elif outcome is ProcessOutcome.CANCELLED:
            self._stopped_end(att)
        else:
            # The body took its own process down (segfault, os._exit, OOM kill): that is
            # the body failing, not the worker being lost (issue 6), so outcome failed.
            info: ErrorInfo | None = res.error_info()
            decision = decide(self._policy(att), att.job.attempt, Outcome.FAILED, rng=self._rng)
            self._decided(att, Outcome.FAILED, Reason.PROCESS_DIED, decision, info)

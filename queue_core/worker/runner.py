"""The worker: one anyio task group of claim loop, finisher, lease renewal, reaper, slots.

Storage is synchronous, so every storage call runs in a worker thread and is batched:
the claim loop claims up to the free-slot count in one call, the finisher writes every
buffered attempt end in one ``finish`` call (at most one in flight, immediately when it
has something), and lease renewal renews every held lease in one call.

Async bodies run on the event loop under ``fail_after(timeout)``. Sync bodies run in
threads (``isolation="thread"``; a timed-out thread cannot be stopped: its attempt is
recorded ``timed_out`` at the deadline and retried on schedule while the thread keeps
its slot -- it is reported *stuck* and a bounded number of replacement slots open) or
in child processes (``isolation="process"``, see :mod:`queue_core.worker.process`).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from queue import SimpleQueue
from typing import Any, Final

import anyio
import anyio.lowlevel
from anyio import to_thread

from queue_core.context import JobContext
from queue_core.durations import parse_duration, to_ms
from queue_core.errors import ConfigError, LeaseLost, SerializationError, StorageError
from queue_core.model import (
    Action,
    AttemptEnd,
    ClaimedJob,
    Decision,
    ErrorInfo,
    Outcome,
    Reason,
    dt_from_ms,
)
from queue_core.policy import RetryPolicy, classify, decide, error_names, renew_interval
from queue_core.storage import SupportsWakeup
from queue_core.task import DEFAULT_KILL_GRACE, Task, check_isolation
from queue_core.worker.reaper import Backoff, reaper_loop
from queue_core.worker.slots import Attempt, SlotTable

if False:  # pragma: no cover - typing only, avoids an import cycle at runtime
    from queue_core.queue import Queue

__all__ = ["Worker", "worker_id"]

log = logging.getLogger("queue_core.worker")

ENV_SLOTS: Final = "QUEUE_CORE_WORKER_SLOTS"
TRACEBACK_LIMIT: Final = 8 * 1024
MESSAGE_LIMIT: Final = 4 * 1024
BURST_HORIZON_MS: Final = 60_000
_COMPLETE: Final = Decision(action=Action.COMPLETE)
_CANCEL: Final = Decision(action=Action.CANCEL)
_POLL_MIN: Final = 0.001
_POLL_MAX: Final = 0.008
_WAKEUP_WAIT: Final = 1.0
_GATHER_WAIT: Final = 0.002  # busy: how long a claim may wait for more free slots
_WATCH_EVERY: Final = 0.05
_DEADLINE_LEAD: Final = 0.2


def _deadline(att: Attempt) -> float | None:
    """When the worker ends ``att`` for its ``timeout`` (monotonic), or ``None``.

    Counted from the claim's return (storage counts from its claim stamp, a moment
    earlier), and acted on a little early (``_DEADLINE_LEAD``, at most a tenth of the
    timeout): storage reaps the attempt at its own deadline, and the worker's record --
    with the mode and the error -- must land first, or it is refused as no longer
    current. So the worker is early by at most the lead, never by a slow claim.
    """
    timeout_ms = att.job.timeout_ms
    if timeout_ms is None:
        return None
    timeout = timeout_ms / 1000.0
    return att.claimed_at + timeout - min(_DEADLINE_LEAD, timeout / 10.0)


def worker_id() -> str:
    """``hostname:pid:short-uuid``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _cap_tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return "…(truncated)\n" + text[-limit:]


def error_info(exc: BaseException) -> ErrorInfo:
    """The recorded form of an exception: names, message, size-capped traceback."""
    error_class, error_type = error_names(exc)
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    msg = str(exc)
    if len(msg) > MESSAGE_LIMIT:
        msg = msg[:MESSAGE_LIMIT] + "…"
    return ErrorInfo(
        error_class=error_class,
        error_type=error_type,
        message=msg,
        traceback=_cap_tail(tb, TRACEBACK_LIMIT),
    )


def _body_call(
    dumps: Callable[[Any], bytes],
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Callable[[], bytes]:
    """The call a body thread makes: the body, then its result serialized."""
    return lambda: dumps(func(*args, **kwargs))


class _Never(Exception):
    """Never raised: stands for a ``retry_on`` whitelist none of whose names matched."""


def _matching(exc: BaseException, names: Sequence[str]) -> tuple[type[BaseException], ...]:
    wanted = set(names)
    return tuple(
        c
        for c in type(exc).__mro__
        if isinstance(c, type)
        and issubclass(c, BaseException)
        and (f"{c.__module__}.{c.__qualname__}" in wanted)
    )


class _CallOptions:
    """Per-call overrides of one job, parsed from ``ClaimedJob.options``."""

    __slots__ = ("policy", "retry_on", "dont_retry_on", "isolation", "kill_grace")

    def __init__(self, text: str) -> None:
        data = json.loads(text)
        raw = data.get("policy")
        self.policy: RetryPolicy | None = RetryPolicy(**raw) if raw else None
        self.retry_on: list[str] | None = data.get("retry_on")
        self.dont_retry_on: list[str] | None = data.get("dont_retry_on")
        iso = data.get("isolation")
        self.isolation: str | None = check_isolation(iso) if iso is not None else None
        kg = data.get("kill_grace")
        self.kill_grace: float | None = float(kg) if kg is not None else None


class _BodyThreads:
    """Daemon threads that run sync bodies; each end is handed back to the event loop.

    Daemon threads, so a body that never returns cannot keep the process alive after
    the worker has shut down (it was recorded and released already). Completions are
    scheduled on the loop without a round trip (``run_sync_soon``), coalesced: ends that
    arrive while a delivery is pending ride along with it, so a burst of short bodies
    wakes the loop once. No task or thread is created per job.
    """

    def __init__(self, on_done: Callable[[Attempt, bool, Any], None]) -> None:
        self._token = anyio.lowlevel.current_token()
        self._on_done = on_done
        self._jobs: SimpleQueue[tuple[Attempt, Callable[[], Any]] | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads: list[threading.Thread] = []
        self._done: list[tuple[Attempt, bool, Any]] = []
        self._delivery_pending = False

    def submit(self, att: Attempt, call: Callable[[], Any]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                t = threading.Thread(target=self._main, name="queue-core body", daemon=True)
                self._threads.append(t)
                t.start()
        self._jobs.put((att, call))

    def _main(self) -> None:
        get, lock, token = self._jobs.get, self._lock, self._token
        soon, deliver = token.backend_class.run_sync_soon, self._deliver
        while True:
            item = get()
            if item is None:
                return
            att, call = item
            try:
                result: tuple[Attempt, bool, Any] = (att, True, call())
            except BaseException as exc:  # noqa: BLE001 - carried back to the loop
                result = (att, False, exc)
            with lock:
                self._idle += 1
                self._done.append(result)
                if self._delivery_pending:
                    continue  # the scheduled delivery will take this end too
                self._delivery_pending = True
            try:
                soon(deliver, (), token.native_token)
            except Exception:  # noqa: BLE001 - the loop is gone: nothing to report to
                return

    def _deliver(self) -> None:
        """On the loop: hand every end reported so far over (one loop wake-up for many)."""
        with self._lock:
            ends, self._done = self._done, []
            self._delivery_pending = False
        for att, ok, value in ends:
            try:
                self._on_done(att, ok, value)
            except Exception:  # noqa: BLE001 - one bad end must not drop the others
                log.exception("recording the end of job %s failed", att.ref.job_id)

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


class _StorageThread:
    """A dedicated daemon thread for one kind of hot storage call (claim, finish).

    A call costs a queue put and one loop wake-up, about a third of a ``to_thread``
    hop (no pool, limiter or cancel scope per call), and with one thread per kind of
    call a claim and a finish run at the same time. Like ``to_thread.run_sync``, the
    caller waits for the call to return even when cancelled meanwhile, so claimed jobs
    or written ends are never abandoned halfway.
    """

    def __init__(self, name: str) -> None:
        self._token = anyio.lowlevel.current_token()
        self._calls: SimpleQueue[
            tuple[Callable[..., Any], tuple[Any, ...], list[Any], anyio.Event] | None
        ] = SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    async def call(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run ``func(*args)`` on this thread and return (or raise) what it did."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        done = anyio.Event()
        box: list[Any] = []
        self._calls.put((func, args, box, done))
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await done.wait()
            raise
        ok, value = box
        if ok:
            return value
        raise value

    def _main(self) -> None:
        get, token = self._calls.get, self._token
        soon, native = token.backend_class.run_sync_soon, token.native_token
        while True:
            item = get()
            if item is None:
                return
            func, args, box, done = item
            try:
                box[:] = (True, func(*args))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                box[:] = (False, exc)
            try:
                soon(done.set, (), native)
            except Exception:  # noqa: BLE001 - the loop is gone: nobody is waiting
                return

    def close(self) -> None:
        self._calls.put(None)


class Worker:
    """A worker bound to one :class:`~queue_core.Queue`.

    Args:
        queue: the queue whose tasks and storage the worker uses.
        queues: queue names to take jobs from (a list or a comma-separated string);
            default: every queue of a registered task, plus ``"default"``.
        slots: attempts run at once (default env ``QUEUE_CORE_WORKER_SLOTS``, else 8).
        burst: return once nothing in ``queues`` is running or ready, and nothing is due
            within 60 s.
        reap_interval: seconds between reaper passes.
        lease: lease per claimed attempt (default the queue's ``lease``).
        shutdown_grace: on SIGTERM/SIGINT (or :meth:`stop`), how long running attempts
            may take to finish before they are released for retry.
        max_replacement_slots: bound on extra slots opened for stuck thread bodies
            (default ``slots``).
        install_signal_handlers: handle SIGTERM/SIGINT (only in the main thread).
        isolation: default ``"thread"`` or ``"process"`` for sync bodies of tasks that
            do not set ``isolation`` themselves (a task's option and a per-call
            override win).
    """

    def __init__(
        self,
        queue: Queue,
        *,
        queues: Sequence[str] | str | None = None,
        slots: int | None = None,
        burst: bool = False,
        reap_interval: float | str = 5.0,
        lease: float | str | None = None,
        shutdown_grace: float | str = 30.0,
        max_replacement_slots: int | None = None,
        install_signal_handlers: bool = True,
        isolation: str | None = None,
    ) -> None:
        self.queue = queue
        self.isolation = check_isolation(isolation) if isolation is not None else "thread"
        self.storage = queue.storage()
        if slots is None:
            env = os.environ.get(ENV_SLOTS)
            try:
                slots = int(env) if env else 8
            except ValueError:
                raise ConfigError(
                    f"invalid {ENV_SLOTS}: {env!r} — expected a positive integer",
                    code="invalid_option",
                    field="slots",
                    value=env,
                ) from None
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 10_000:
            raise ConfigError(
                f"invalid slots: {slots!r} — expected an integer from 1 to 10000",
                code="invalid_option",
                field="slots",
                value=slots,
            )
        if isinstance(queues, str):
            queues = [q.strip() for q in queues.split(",") if q.strip()]
        self._explicit_queues = list(queues) if queues else None
        self.slots = slots
        self.burst = burst
        self.reap_interval = parse_duration(reap_interval, field="reap_interval")
        self.lease = parse_duration(lease, field="lease") if lease is not None else queue.lease
        self.lease_ms = to_ms(self.lease)
        self.shutdown_grace = parse_duration(shutdown_grace, field="shutdown_grace")
        self.install_signal_handlers = install_signal_handlers
        self.id = worker_id()
        replacements = slots if max_replacement_slots is None else max_replacement_slots
        self._table = SlotTable(slots, replacements)
        self._serializer = queue.serializer
        self._rng: Callable[[], float] = random.random
        self._call_cache: dict[str, _CallOptions] = {}
        self._ends: list[AttemptEnd] = []
        self._heartbeats: dict[Any, Attempt] = {}
        self._stop = threading.Event()
        self._stopping = False
        self._processed = 0
        self._process_pool: Any = None

    # ------------------------------------------------------------------ public

    @property
    def queues(self) -> list[str]:
        """The queue names this worker takes jobs from."""
        if self._explicit_queues:
            return self._explicit_queues
        names = {t.queue_name for t in self.queue.tasks.values()}
        names.add("default")
        return sorted(names)

    def run(self) -> None:
        """Run until stopped (or, with ``burst``, until the queues are drained)."""
        anyio.run(self.run_async)

    def stop(self) -> None:
        """Ask the worker to shut down gracefully (thread-safe)."""
        self._stop.set()

    def stats(self) -> dict[str, Any]:
        """Worker-local figures: slots, running and stuck attempts, processed count."""
        return {
            "worker_id": self.id,
            "slots": self.slots,
            "running": len(self._table.running),
            "stuck": self._table.stuck,
            "free": self._table.free(),
            "processed": self._processed,
            "buffered_ends": len(self._ends),
        }

    # ------------------------------------------------------------------ main

    async def run_async(self) -> None:
        """The worker's task group (use :meth:`run` from sync code)."""
        self._queues = self.queues
        self._tasks: dict[str, Task[Any, Any]] = self.queue.tasks
        self._io = anyio.CapacityLimiter(8)
        self._bodies = anyio.CapacityLimiter(self.slots + self._table.max_replacements)
        self._flush_wake = anyio.Event()
        self._slot_wake = anyio.Event()
        self._hb_wake = anyio.Event()
        self._flushing = False
        self._wakeup = isinstance(self.storage, SupportsWakeup)
        self._threads = _BodyThreads(self._thread_done)
        self._threads_token = anyio.lowlevel.current_token()
        self._claim_io = _StorageThread("queue-core claim")
        self._finish_io = _StorageThread("queue-core finish")
        log.info("worker %s starting: queues=%s slots=%d", self.id, self._queues, self.slots)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._finisher)
            tg.start_soon(self._renewer)
            tg.start_soon(self._heartbeater)
            tg.start_soon(self._watchdog)
            await tg.start(reaper_loop, self.storage, self.reap_interval, self._io)
            main = threading.current_thread() is threading.main_thread()
            if self.install_signal_handlers and main:
                await tg.start(self._signal_watcher)
            await self._claim_loop()
            await self._shutdown()
            tg.cancel_scope.cancel()
        self._threads.close()
        self._claim_io.close()
        self._finish_io.close()
        if self._process_pool is not None:
            await self._process_pool.aclose()
        log.info("worker %s stopped after %d attempts", self.id, self._processed)

    def _request_stop(self) -> None:
        self._stopping = True
        self._stop.set()
        self._slot_wake.set()

    async def _signal_watcher(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                if self._stopping:
                    log.warning("second signal %s: releasing running attempts now", signum)
                    self.shutdown_grace = 0.0
                else:
                    log.info("signal %s: stopping (grace %.1f s)", signum, self.shutdown_grace)
                self._request_stop()

    # ------------------------------------------------------------------ claim loop

    async def _claim_loop(self) -> None:
        storage = self.storage
        table = self._table
        backoff = Backoff()
        poll = _POLL_MIN
        claim, claim_io = storage.claim, self._claim_io.call
        wait_claim = self._wait_then_claim
        wid, queues, lease_ms = self.id, self._queues, self.lease_ms
        half = (self.slots + 1) // 2
        idle = False  # the last claim found nothing: the next one waits for a wake-up first
        while True:
            if self._stop.is_set():
                self._stopping = True
                return
            free = table.free()
            if free <= 0:
                self._slot_wake = anyio.Event()
                with anyio.move_on_after(0.2):
                    await self._slot_wake.wait()
                continue
            if free < half and table.running and not idle:
                # Busy: let a few more slots free up so one claim fills several (each
                # claim is a write transaction with a fixed cost), but not for long.
                with anyio.move_on_after(_GATHER_WAIT):
                    while free < half and table.running:
                        self._slot_wake = anyio.Event()
                        await self._slot_wake.wait()
                        free = table.free()
                free = table.free()
            try:
                if idle and self._wakeup and not table.running:
                    started, jobs = await claim_io(wait_claim, free)
                    if started:
                        idle = False
                        poll = _POLL_MIN
                        if not jobs:
                            continue
                else:
                    jobs = await claim_io(claim, wid, queues, free, lease_ms)
            except StorageError as exc:
                idle = False
                delay = backoff.next()
                log.warning("claim failed (%s); retrying in %.2f s", exc, delay)
                await anyio.sleep(delay)
                continue
            backoff.reset()
            if jobs:
                idle = False
                poll = _POLL_MIN
                claimed_at = anyio.current_time()
                for job in jobs:
                    self._start(job, claimed_at)
                continue
            if self.burst and not table.running and await self._burst_done():
                return
            if self._wakeup and not table.running:
                idle = True
                poll = _POLL_MIN
                continue
            idle = False
            await anyio.sleep(poll)
            poll = min(poll * 2, _POLL_MAX)

    def _wait_then_claim(self, free: int) -> tuple[int, list[ClaimedJob]]:
        """On the claim thread: wait for a wake-up (at most ``_WAKEUP_WAIT``), then claim.

        One hand-off to the claim thread instead of a wait on another thread, a loop
        wake-up and a second hand-off for the claim: the claim follows the wake-up on
        the same thread at once, and plain sync bodies start from here too (see
        :meth:`_start_direct`). Returns how many were started so, and the claimed jobs
        left for the loop to start. Nothing is claimed once a stop was requested (a
        batch claimed just before goes on through the normal shutdown path), and the
        wait is short, so shutdown waits for at most one ``_WAKEUP_WAIT``.
        """
        stop = self._stop
        if stop.is_set():
            return 0, []
        try:
            self.storage.wait_for_jobs(self._queues, _WAKEUP_WAIT)  # type: ignore[attr-defined]
        except StorageError as exc:
            log.warning("wait_for_jobs failed (%s)", exc)
            stop.wait(0.1)
            return 0, []
        if stop.is_set():
            return 0, []
        jobs = self.storage.claim(self.id, self._queues, free, self.lease_ms)
        if not jobs:
            return 0, jobs
        return self._start_direct(jobs)

    def _start_direct(self, jobs: list[ClaimedJob]) -> tuple[int, list[ClaimedJob]]:
        """On the claim thread: start plain sync bodies (thread isolation, no per-call
        options, a payload that decodes) straight on a body thread, without a loop round
        trip; every other job is returned for :meth:`_start` on the loop.

        The attempts are registered on the loop by a callback scheduled *before* their
        bodies are handed over, so the loop records them (slot, claim time, deadline)
        before any end can be delivered: both travel through the loop's FIFO of
        thread-scheduled callbacks.
        """
        tasks, loads = self._tasks, self._serializer.loads_payload
        direct: list[tuple[Attempt, Task[Any, Any], tuple[Any, ...], dict[str, Any]]] = []
        rest: list[ClaimedJob] = []
        for job in jobs:
            task = tasks.get(job.task_name)
            if task is None or task.is_async or self._isolation(task) == "process" or job.options:
                rest.append(job)
                continue
            try:
                args, kwargs = loads(job.payload)
            except Exception:  # noqa: BLE001 - the loop records the bad payload
                rest.append(job)
                continue
            att = Attempt(job, task)
            if job.heartbeat_ms:  # storage counts silence from the claim
                att.last_beat = time.monotonic()
            if task.takes_ctx:
                kwargs["ctx"] = self._context(att, loop=False)
            direct.append((att, task, args, kwargs))
        if not direct:
            return 0, rest
        token = self._threads_token
        token.backend_class.run_sync_soon(
            self._register_direct, ([d[0] for d in direct],), token.native_token
        )
        dumps, submit = self._serializer.dumps_result, self._threads.submit
        for att, task, args, kwargs in direct:
            submit(att, _body_call(dumps, task.func, args, kwargs))
        return len(direct), rest

    def _register_direct(self, atts: list[Attempt]) -> None:
        """On the loop: record attempts whose bodies the claim thread started."""
        claimed_at = anyio.current_time()
        table = self._table
        for att in atts:
            att.claimed_at = claimed_at
            att.deadline = _deadline(att)
            table.add(att)

    async def _burst_done(self) -> bool:
        await self._flush_all()
        try:
            pending = await to_thread.run_sync(
                self.storage.count_pending, self._queues, BURST_HORIZON_MS, limiter=self._io
            )
        except StorageError as exc:
            log.warning("count_pending failed (%s)", exc)
            return False
        return pending == 0 and not self._table.running

    # ------------------------------------------------------------------ attempts

    def _start(self, job: ClaimedJob, claimed_at: float | None = None) -> None:
        task = self._tasks.get(job.task_name)
        att = Attempt(job, task)
        att.claimed_at = anyio.current_time() if claimed_at is None else claimed_at
        if job.heartbeat_ms:  # storage counts silence from the claim
            att.last_beat = time.monotonic()
        self._table.add(att)
        if task is None:
            exc = ConfigError(
                f"unknown task {job.task_name!r}: not registered on worker {self.id}",
                code="unknown_task",
                field="task_name",
                value=job.task_name,
            )
            self._end(
                att,
                Outcome.FAILED,
                Reason.UNKNOWN_TASK,
                Decision(action=Action.DEAD, reason=Reason.UNKNOWN_TASK.value),
                error=error_info(exc),
            )
            self._free(att)
            return
        if task.is_async or self._isolation(task) == "process" or job.options:
            self._tg.start_soon(self._run, att)
        else:
            self._start_thread(att, task)

    async def _run(self, att: Attempt) -> None:
        job = att.job
        task = att.task
        assert task is not None
        try:
            try:
                if job.options:
                    att.call = self._call_options(job.options)
                args, kwargs = self._serializer.loads_payload(job.payload)
            except Exception as exc:  # noqa: BLE001 - any decode failure is a bad payload
                att.mode = "async" if task.is_async else "thread"
                self._end(
                    att,
                    Outcome.FAILED,
                    Reason.BAD_PAYLOAD,
                    Decision(action=Action.DEAD, reason=Reason.BAD_PAYLOAD.value),
                    error=error_info(exc),
                )
                self._free(att)
                return
            if task.is_async:
                att.mode = "async"
                if task.takes_ctx:
                    kwargs["ctx"] = self._context(att, loop=True)
                await self._run_async(att, task, args, kwargs)
            else:
                iso = att.call.isolation if att.call and att.call.isolation else None
                iso = iso or self._isolation(task)
                if iso == "process":
                    att.mode = "process"
                    await self._run_process(att, task, args, kwargs)
                else:
                    self._start_thread(att, task, (args, kwargs))
                    return  # the slot is freed when the thread reports back
        except BaseException:
            self._free(att)
            raise
        else:
            if att.ctx is not None:
                att.ctx._close()
            self._free(att)

    def _start_thread(
        self,
        att: Attempt,
        task: Task[Any, Any],
        decoded: tuple[tuple[Any, ...], dict[str, Any]] | None = None,
    ) -> None:
        job = att.job
        if decoded is None:
            try:
                decoded = self._serializer.loads_payload(job.payload)
            except Exception as exc:  # noqa: BLE001 - any decode failure is a bad payload
                self._end(
                    att,
                    Outcome.FAILED,
                    Reason.BAD_PAYLOAD,
                    Decision(action=Action.DEAD, reason=Reason.BAD_PAYLOAD.value),
                    error=error_info(exc),
                )
                self._free(att)
                return
        args, kwargs = decoded
        if task.takes_ctx:
            kwargs["ctx"] = self._context(att, loop=False)
        att.deadline = _deadline(att)
        func, dumps = task.func, self._serializer.dumps_result
        self._threads.submit(att, lambda: dumps(func(*args, **kwargs)))

    def _thread_done(self, att: Attempt, ok: bool, value: Any) -> None:
        """On the loop: a sync body returned (``ok``) or raised (``value``)."""
        try:
            if att.ended:  # timed out (stuck), lease lost or released meanwhile
                return
            if att.stop_requested():
                self._stopped_end(att)
            elif ok:
                self._succeed(att, value)
            elif isinstance(value, SerializationError):
                self._end(
                    att,
                    Outcome.FAILED,
                    Reason.ERROR,
                    Decision(action=Action.DEAD, reason=Reason.FATAL.value),
                    error=error_info(value),
                )
            else:
                self._fail(att, value)
        finally:
            if att.ctx is not None:
                att.ctx._close()
            self._free(att)

    def _free(self, att: Attempt) -> None:
        self._table.remove(att)
        self._heartbeats.pop(att.ref, None)
        self._processed += 1
        self._slot_wake.set()

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
            heartbeat_interval=hb_ms / 1000.0 if hb_ms else None,
            on_heartbeat=sink,
        )
        att.ctx = ctx
        return ctx

    def _direct_heartbeat(self, att: Attempt) -> Callable[[], bool]:
        storage, ref = self.storage, att.ref

        def beat() -> bool:
            att.last_beat = time.monotonic()
            try:
                return storage.heartbeat(ref)
            except LeaseLost:
                att.lease_lost = True
                return True
            except StorageError as exc:
                log.warning("heartbeat of job %s failed (%s)", ref.job_id, exc)
                return att.stop_requested()

        return beat

    def _queue_heartbeat(self, att: Attempt) -> Callable[[], bool]:
        def beat() -> bool:
            att.last_beat = time.monotonic()
            self._heartbeats[att.ref] = att
            self._hb_wake.set()
            return att.stop_requested()

        return beat

    def _policy(self, att: Attempt) -> RetryPolicy:
        task = att.task
        assert task is not None
        policy = task.policy
        if att.call is not None and att.call.policy is not None:
            policy = policy.merged(att.call.policy)
        if policy.max_attempts != att.job.max_attempts:
            policy = policy.merged(RetryPolicy(max_attempts=att.job.max_attempts))
        return policy

    def _call_options(self, text: str) -> _CallOptions:
        found = self._call_cache.get(text)
        if found is None:
            found = _CallOptions(text)
            if len(self._call_cache) > 256:
                self._call_cache.clear()
            self._call_cache[text] = found
        return found

    def _fail(self, att: Attempt, exc: BaseException, info: ErrorInfo | None = None) -> None:
        """Record a body's exception, classified with the live exception.

        ``info`` is the recorded form when it is not ``exc``'s own (a process child's).
        """
        task = att.task
        assert task is not None
        policy = self._policy(att)
        retry_on, dont_retry_on = task.retry_on, task.dont_retry_on
        call = att.call
        if call is not None:
            if call.retry_on is not None:
                retry_on = _matching(exc, call.retry_on) or (_Never,)
                dont_retry_on = ()
            if call.dont_retry_on is not None:
                dont_retry_on = _matching(exc, call.dont_retry_on)
                retry_on = ()
        retryable = classify(
            exc,
            retry_on=retry_on,
            dont_retry_on=dont_retry_on,
            non_retryable=policy.non_retryable,
        )
        decision = decide(
            policy, att.job.attempt, Outcome.FAILED, retryable=retryable, rng=self._rng
        )
        self._end(
            att, Outcome.FAILED, Reason.ERROR, decision, error=info or error_info(exc)
        )

    def _stopped_end(self, att: Attempt) -> None:
        """The body ended after a stop request: record a cancel, or nothing."""
        if att.cancel_requested and not att.lease_lost and not att.released:
            self._end(att, Outcome.CANCELLED, Reason.CANCELLED, _CANCEL)
        else:
            att.ended = True

    def _timed_out(self, att: Attempt, reason: Reason = Reason.TIMEOUT) -> None:
        decision = decide(self._policy(att), att.job.attempt, Outcome.TIMED_OUT, rng=self._rng)
        if reason is Reason.HEARTBEAT_TIMEOUT:
            message = (
                f"attempt {att.job.attempt} sent no heartbeat for "
                f"{(att.job.heartbeat_ms or 0) / 1000:g} s"
            )
        else:
            message = (
                f"attempt {att.job.attempt} ran past its timeout of "
                f"{(att.job.timeout_ms or 0) / 1000:g} s"
            )
        err = ErrorInfo(
            error_class="TimeoutError", error_type="builtins.TimeoutError", message=message
        )
        self._end(att, Outcome.TIMED_OUT, reason, decision, error=err)

    def _succeed(self, att: Attempt, data: bytes) -> None:
        self._end(att, Outcome.SUCCEEDED, None, _COMPLETE, result=data)

    def _end(
        self,
        att: Attempt,
        outcome: Outcome,
        reason: Reason | None,
        decision: Decision,
        *,
        result: bytes | None = None,
        error: ErrorInfo | None = None,
    ) -> None:
        if att.ended:
            return
        att.ended = True
        self._ends.append(
            AttemptEnd(
                ref=att.ref,
                outcome=outcome,
                decision=decision,
                reason=None if reason is None else reason.value,
                result=result,
                error=error,
                mode=att.mode,
            )
        )
        if not self._flushing:
            self._flush_wake.set()

    async def _run_async(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        deadline = _deadline(att)
        timeout = None if deadline is None else max(0.0, deadline - anyio.current_time())
        with anyio.CancelScope() as scope:
            att.scope = scope
            if att.stop_requested():
                scope.cancel()
            try:
                with anyio.fail_after(timeout) as deadline_scope:
                    value = await task.func(*args, **kwargs)
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

    def _succeed_value(self, att: Attempt, value: Any) -> None:
        """Record success with the serialized return value; a value the serializer
        cannot carry fails the attempt fatally (retrying would return it again)."""
        try:
            data = self._serializer.dumps_result(value)
        except SerializationError as exc:
            self._end(
                att,
                Outcome.FAILED,
                Reason.ERROR,
                Decision(action=Action.DEAD, reason=Reason.FATAL.value),
                error=error_info(exc),
            )
            return
        self._succeed(att, data)

    def _isolation(self, task: Task[Any, Any]) -> str:
        """The isolation a sync body of ``task`` runs with, before per-call overrides."""
        return task.isolation if task.isolation_explicit else self.isolation

    async def _run_process(
        self, att: Attempt, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Hook for ``isolation="process"``: the attempt runs in a child process group."""
        from queue_core.worker.process import ProcessOutcome, ProcessPool

        if self._process_pool is None:
            self._process_pool = ProcessPool(self.slots)
        job = att.job
        kill_grace = task.kill_grace
        if att.call is not None and att.call.kill_grace is not None:
            kill_grace = att.call.kill_grace
        hb = self._queue_heartbeat(att) if job.heartbeat_ms else None
        att.deadline = deadline = _deadline(att)
        res = await self._process_pool.run(
            task.func.__module__,
            task.func.__qualname__,
            args,
            kwargs,
            job_id=job.id,
            attempt=job.attempt,
            timeout=None if deadline is None else max(0.0, deadline - anyio.current_time()),
            kill_grace=kill_grace if kill_grace is not None else DEFAULT_KILL_GRACE,
            heartbeat=hb,
            heartbeat_every=(job.heartbeat_ms or 3000) / 3000.0,
            cancelled=att.stop_requested,
            wants_ctx=task.takes_ctx,
        )
        if att.ended:
            return
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
            decision = decide(self._policy(att), job.attempt, Outcome.FAILED, rng=self._rng)
            self._end(att, Outcome.FAILED, Reason.PROCESS_DIED, decision, error=res.error_info())

    # ------------------------------------------------------------------ services

    async def _finisher(self) -> None:
        while True:
            if not self._ends:
                self._flush_wake = anyio.Event()
                await self._flush_wake.wait()
                continue
            await self._flush_once()

    async def _flush_once(self) -> None:
        batch, self._ends = self._ends, []
        self._flushing = True
        try:
            with anyio.CancelScope(shield=True):
                took = await self._finish_io.call(self.storage.finish, batch)
        except StorageError as exc:
            self._ends[:0] = batch
            log.warning("finish of %d attempt ends failed (%s); will retry", len(batch), exc)
            await anyio.sleep(self._flush_backoff.next())
            return
        finally:
            self._flushing = False
        self._flush_backoff.reset()
        for end, ok in zip(batch, took, strict=False):
            if not ok:
                log.info(
                    "attempt %d of job %s was no longer current; its %s end was refused",
                    end.ref.attempt,
                    end.ref.job_id,
                    end.outcome,
                )

    _flush_backoff = Backoff()

    async def _flush_all(self) -> None:
        while self._ends or self._flushing:
            if self._flushing:
                await anyio.sleep(0.001)
            else:
                await self._flush_once()

    async def _renewer(self) -> None:
        interval = renew_interval(self.lease)
        while True:
            await anyio.sleep(interval)
            live = self._table.live()
            if not live:
                continue
            refs = [a.ref for a in live]
            try:
                res = await to_thread.run_sync(
                    self.storage.renew, refs, self.lease_ms, limiter=self._io
                )
            except StorageError as exc:
                log.warning("lease renewal failed (%s)", exc)
                continue
            running = self._table.running
            for ref in res.lost:
                att = running.get(ref)
                if att is not None and not att.ended:
                    log.warning("lease of job %s attempt %d lost", ref.job_id, ref.attempt)
                    att.lease_lost = True
                    att.ended = True
                    self._stop_attempt(att)
                    if att.mode == "thread":  # reaped (e.g. heartbeat_timeout): body goes on
                        self._table.mark_stuck(att)
                        self._slot_wake.set()
            for ref in res.cancel_requested:
                att = running.get(ref)
                if att is not None and not att.ended:
                    att.cancel_requested = True
                    self._stop_attempt(att)

    def _stop_attempt(self, att: Attempt) -> None:
        if att.ctx is not None:
            att.ctx._cancel()
        if att.scope is not None:
            att.scope.cancel()

    async def _heartbeater(self) -> None:
        """Writes heartbeats that async bodies (and process children) queued."""
        while True:
            if not self._heartbeats:
                self._hb_wake = anyio.Event()
                await self._hb_wake.wait()
                continue
            pending, self._heartbeats = self._heartbeats, {}
            for ref, att in pending.items():
                if att.ended:
                    continue
                try:
                    cancel = await to_thread.run_sync(
                        self.storage.heartbeat, ref, limiter=self._io
                    )
                except LeaseLost:
                    att.lease_lost = True
                    att.ended = True
                    self._stop_attempt(att)
                    continue
                except StorageError as exc:
                    log.warning("heartbeat of job %s failed (%s)", ref.job_id, exc)
                    continue
                if cancel and not att.cancel_requested:
                    att.cancel_requested = True
                    self._stop_attempt(att)

    async def _watchdog(self) -> None:
        """Records attempts past their deadline (process groups get stopped; threads: stuck)."""
        table = self._table
        while True:
            await anyio.sleep(_WATCH_EVERY)
            if self._stop.is_set() and not self._stopping:
                self._request_stop()
            now, mono = anyio.current_time(), time.monotonic()
            for att in list(table.running.values()):
                hb_ms = att.job.heartbeat_ms
                if hb_ms and not att.ended:
                    hb = hb_ms / 1000.0  # acted on early, like a deadline (see _deadline)
                    if mono >= att.last_beat + hb - min(_DEADLINE_LEAD, hb / 10.0):
                        self._heartbeat_expired(att)
                        continue
                if att.deadline is not None and now >= att.deadline and not att.stuck:
                    if att.mode == "process":
                        if not att.ended:
                            self._timed_out(att)
                        continue
                    if not att.ended:
                        self._timed_out(att)
                    table.mark_stuck(att)
                    if att.ctx is not None:
                        att.ctx._cancel()
                    log.warning(
                        "job %s attempt %d timed out in a thread that cannot be stopped; "
                        "its slot is stuck until it returns (%d stuck)",
                        att.ref.job_id,
                        att.ref.attempt,
                        table.stuck,
                    )
                    self._slot_wake.set()

    def _heartbeat_expired(self, att: Attempt) -> None:
        """``att`` sent no heartbeat in time: record it, stop what can be stopped."""
        self._timed_out(att, Reason.HEARTBEAT_TIMEOUT)
        att.expired = True  # a process group is stopped, an async body cancelled
        self._stop_attempt(att)
        if att.mode == "thread":
            self._table.mark_stuck(att)
            self._slot_wake.set()
        log.warning(
            "job %s attempt %d sent no heartbeat within %g s: timed out",
            att.ref.job_id,
            att.ref.attempt,
            (att.job.heartbeat_ms or 0) / 1000,
        )

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        table = self._table
        with anyio.move_on_after(self.shutdown_grace):
            while table.busy() > 0 and any(not a.ended for a in table.running.values()):
                self._slot_wake = anyio.Event()
                with anyio.move_on_after(0.05):
                    await self._slot_wake.wait()
        for att in list(table.running.values()):
            if att.ended:
                continue
            task = att.task
            decision = (
                decide(self._policy(att), att.job.attempt, Outcome.LOST, rng=self._rng)
                if task is not None
                else Decision(action=Action.RETRY)
            )
            self._end(att, Outcome.LOST, Reason.WORKER_SHUTDOWN, decision)
            att.released = True
            self._stop_attempt(att)
            log.info("released job %s attempt %d for retry", att.ref.job_id, att.ref.attempt)
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.shutdown_grace + 10.0):
            await self._flush_all()

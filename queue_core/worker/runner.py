"""The worker: one anyio task group of claim loop, finisher, lease renewal, reaper, slots.

Storage is synchronous, so every storage call runs in a worker thread and is batched:
the claim loop claims up to the free-slot count in one call, the finisher writes every
buffered attempt end in one ``finish`` call (at most one in flight, immediately when it
has something), and lease renewal renews every held lease in one call.

Async bodies run on the event loop under their deadline. Sync bodies run in threads
(``isolation="thread"``; a timed-out thread cannot be stopped: its attempt is recorded
``timed_out`` at the deadline and retried on schedule while the thread keeps its slot
-- it is reported *stuck* and a bounded number of replacement slots open) or in child
processes (``isolation="process"``, see :mod:`queue_core.worker.process`).

The parts live in their own modules (see :mod:`queue_core.worker.base`): claiming,
running bodies, attempt recording, background services, thread plumbing. Every time
the worker reads, and every wait of its services, goes through its
:class:`~queue_core.clock.Clock`.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import socket
import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio

from queue_core.clock import Clock
from queue_core.durations import parse_duration, to_ms
from queue_core.errors import ConfigError
from queue_core.events import WorkerListener
from queue_core.storage import SupportsWakeup
from queue_core.task import check_isolation
from queue_core.worker.claiming import BURST_HORIZON_MS, Claiming
from queue_core.worker.finishing import FinishThread
from queue_core.worker.flowsteps import SCRIPT_TASK, script_task
from queue_core.worker.log import log
from queue_core.worker.outage import Outage
from queue_core.worker.presence import cancel_poll_loop, deregister, presence_loop
from queue_core.worker.reaper import Backoff, reaper_loop
from queue_core.worker.recording import error_info
from queue_core.worker.slots import SlotTable
from queue_core.worker.startup import FirstClaim, after_first_claim
from queue_core.worker.threads import BodyThreads, StorageThread, event_class
from queue_core.worker.timing import DueTimes, Timing

if TYPE_CHECKING:
    from queue_core.model import ClaimedJob
    from queue_core.queue import Queue
    from queue_core.worker.scheduler import Scheduler

__all__ = ["BURST_HORIZON_MS", "Worker", "error_info", "worker_id"]

ENV_SLOTS: Final = "QUEUE_CORE_WORKER_SLOTS"
ENV_TTL: Final = "QUEUE_CORE_WORKER_TTL"


def _check_slots(slots: object) -> int:
    """``slots``, or env ``QUEUE_CORE_WORKER_SLOTS``, else 8; checked (``ConfigError``)."""
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
    return slots


def _check_max_tasks_per_child(value: object) -> int | None:
    """``max_tasks_per_child``: ``None`` or a positive integer (``ConfigError``)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ConfigError(
        f"invalid max_tasks_per_child: {value!r} — expected a positive integer or None",
        code="invalid_option",
        field="max_tasks_per_child",
        value=value,
    )


def _presence_ttl_ms(ttl: float | str | None) -> int:
    """``ttl``, or env ``QUEUE_CORE_WORKER_TTL``, else 15 s, in ms (``ConfigError``)."""
    if ttl is not None:
        return to_ms(parse_duration(ttl, field="presence_ttl"))
    env = os.environ.get(ENV_TTL)
    return to_ms(parse_duration(env, field=ENV_TTL)) if env else 15_000


def worker_id() -> str:
    """``hostname:pid:short-uuid``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker(Claiming):
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
        max_tasks_per_child: with ``isolation="process"``, start a fresh child once one
            has run this many attempts (default ``None``: children are kept; module
            globals a body sets persist across the attempts one child runs).
        clock: the clock every reading and every service wait of the worker goes
            through (default: the queue's clock, a :class:`~queue_core.clock.SystemClock`
            unless the queue was given another).
        listeners: :class:`~queue_core.events.WorkerListener` objects told of the
            worker's start and stop and of every attempt's start and end, after those
            registered on the queue (``queue.add_worker_listener``).
        presence_ttl: how long the worker's record in storage (``queue-core workers``)
            stays live without a refresh; refreshed every third of it (default env
            ``QUEUE_CORE_WORKER_TTL``, else 15 s). A killed worker drops out after it.
        scheduler: run the scheduler of the queue's periodic tasks
            (:mod:`queue_core.worker.scheduler`; default on, never in a burst worker).
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
        max_tasks_per_child: int | None = None,
        clock: Clock | None = None,
        listeners: Sequence[WorkerListener] = (),
        presence_ttl: float | str | None = None,
        scheduler: bool = True,
    ) -> None:
        self.queue = queue
        self._listeners = (*queue.worker_listeners, *listeners)
        self.presence_ttl_ms = _presence_ttl_ms(presence_ttl)
        self.scheduler = scheduler and not burst
        self._scheduler: Scheduler | None = None
        self.isolation = check_isolation(isolation) if isolation is not None else "thread"
        self.max_tasks_per_child = _check_max_tasks_per_child(max_tasks_per_child)
        self.storage = queue.storage()
        slots = _check_slots(slots)
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
        self._rng = random.random
        self._timing = Timing(clock if clock is not None else queue.clock)
        self._call_cache = {}
        self._fits = {}
        self._ends = []
        self._retries_due = DueTimes()
        self._outage = Outage(self._timing.monotonic)
        self._heartbeats = {}
        self._stop = threading.Event()
        self._stopping = False
        self._processed = 0
        self._process_pool = None
        self._flush_backoff = Backoff()  # per worker: one worker's outage is not another's
        self._burst_said = None
        self._replay_counts = {}

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

    async def _claim(self, state: Any, free: int) -> list[ClaimedJob] | None:
        try:
            return await super()._claim(state, free)
        finally:
            self._first_claim.done()  # the services' storage calls may start (startup.py)

    def _reap_hold(self) -> float:
        """How long the reaper holds off after a storage outage: the longer of the lease
        and the longest heartbeat of this worker's tasks (see ``worker/outage.py``)."""
        beats = [t.heartbeat for t in self._tasks.values() if t.heartbeat]
        return max([self.lease, *beats])

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
            "buffered_ends": len(self._ends) + self._unwritten(),
        }

    def _may_gather(self) -> bool:
        """On the finish thread (and the loop, as ends are handed over): ends may wait to
        be written with more while the queue is backed up (the last claim took all it
        asked for, so more ends are coming soon), not while the worker stops. Otherwise
        what was handed over is all there is for now: a flow step or a job whose
        successor its end releases must not wait for ends that will not come."""
        return self._backlog and not self._stopping

    def _unwritten(self) -> int:
        finish_io = getattr(self, "_finish_io", None)  # set by run_async
        return 0 if finish_io is None else finish_io.unwritten()

    # ------------------------------------------------------------------ main

    def _set_up_run(self) -> None:
        """The state of one run: task table, events, body/claim/finish threads."""
        self._queues = self.queues
        self._tasks = {SCRIPT_TASK: script_task(self.queue), **self.queue.tasks}
        self._specs = {}
        self._io = anyio.CapacityLimiter(8)
        self._event = event_class()
        self._flush_wake = self._event()
        self._slot_wake = self._event()
        self._hb_wake = anyio.Event()
        self._flushing = False
        self._wakeup = isinstance(self.storage, SupportsWakeup)
        self._threads = BodyThreads(
            self._thread_done, (self._delivery_begins, self._delivery_ended)
        )
        self._claim_io = StorageThread("queue-core claim")
        self._finish_failed = None
        self._first_claim = FirstClaim()
        self._finish_io = FinishThread(
            self.storage.finish,
            self._finish_written,
            self._finish_failed_soon,
            may_gather=self._may_gather,
        )

    async def run_async(self) -> None:
        """The worker's task group (use :meth:`run` from sync code)."""
        self._set_up_run()
        log.info("worker %s starting: queues=%s slots=%d", self.id, self._queues, self.slots)
        self._notify("worker_started", self)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._finisher)
            tg.start_soon(self._renewer)
            tg.start_soon(self._heartbeater)
            tg.start_soon(self._watchdog)
            tg.start_soon(after_first_claim, self._first_claim, presence_loop, self)
            tg.start_soon(cancel_poll_loop, self)
            tg.start_soon(
                after_first_claim,
                self._first_claim,
                functools.partial(reaper_loop, outage=self._outage, hold=self._reap_hold()),
                self.storage,
                self.reap_interval,
                self._io,
                self._timing,
                self._replay_pass,
            )
            if self.scheduler:
                from queue_core.worker.scheduler import scheduler_for  # not in burst

                self._scheduler = scheduler_for(
                    self.queue, self.storage, self._timing, self._io, self._outage
                )
                if self._scheduler is not None:
                    await tg.start(self._scheduler.run)
            main = threading.current_thread() is threading.main_thread()
            if self.install_signal_handlers and main:
                await tg.start(self._signal_watcher)
            await self._claim_loop()
            await self._shutdown()
            tg.cancel_scope.cancel()
        await deregister(self)
        self._threads.close()
        self._claim_io.close()
        self._finish_io.close()
        if self._process_pool is not None:
            await self._process_pool.aclose()
        log.info("worker %s stopped after %d attempts", self.id, self._processed)
        self._notify("worker_stopped", self)

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

"""The worker: one anyio task group of claim loop, finisher, lease renewal, reaper, slots.

:class:`Worker` is the public face and the composition root: it checks its settings
(:mod:`~queue_core.worker.settings`), and each run assembles the parts (see
:mod:`queue_core.worker`), each given the state it needs and the worker's
:class:`~queue_core.app.clock.Clock` (:class:`~queue_core.worker.timing.Timing`), starts
the services in its task group, runs the claim loop until a stop, then the shutdown.

Storage is synchronous, so every storage call runs in a worker thread and is batched:
the claim loop claims up to the free-slot count in one call, the finisher writes every
buffered attempt end in one ``finish`` call (at most one in flight, immediately when it
has something), and lease renewal renews every held lease in one call.

Async bodies run on the event loop under their deadline. Sync bodies run in threads
(``isolation="thread"``; a timed-out thread cannot be stopped: its attempt is recorded
``timed_out`` at the deadline and retried on schedule while the thread keeps its slot
-- it is reported *stuck* and a bounded number of replacement slots open) or in child
processes (``isolation="process"``, see :mod:`queue_core.worker.process`).
"""

from __future__ import annotations

import functools
import os
import random
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from queue_core.app.clock import Clock
from queue_core.app.events import WorkerListener
from queue_core.app.task import Task, check_isolation
from queue_core.records.durations import parse_duration, to_ms
from queue_core.storage.abilities import SupportsWaitInterrupt
from queue_core.storage.urls import mask_url
from queue_core.worker.claiming import BURST_HORIZON_MS, ClaimLoop
from queue_core.worker.finishing import Finisher
from queue_core.worker.flowsteps import file_step_tasks
from queue_core.worker.heartbeats import Heartbeats
from queue_core.worker.leases import LeaseRenewer
from queue_core.worker.listeners import Listeners
from queue_core.worker.log import check_log_tracebacks, log
from queue_core.worker.outage import Outage
from queue_core.worker.prefetch import watch_pauses
from queue_core.worker.presence import CancelPoll, Presence
from queue_core.worker.progress import ProgressWriter
from queue_core.worker.reaper import Backoff, reaper_loop
from queue_core.worker.recording import Recorder, error_info
from queue_core.worker.replay import Replayer
from queue_core.worker.running import Runner
from queue_core.worker.settings import (
    check_flag,
    check_max_tasks_per_child,
    check_prefetch,
    check_queues,
    check_slots,
    presence_ttl_ms,
    step_gate,
    worker_id,
)
from queue_core.worker.startup import FirstClaim, after_first_claim, freeze_start_heap
from queue_core.worker.state import RunState
from queue_core.worker.timing import DueTimes, Timing
from queue_core.worker.watchdog import Watchdog

if TYPE_CHECKING:
    from queue_core.worker.host import WorkerHost
    from queue_core.worker.scheduler import Scheduler

__all__ = ["BURST_HORIZON_MS", "Worker", "WorkerParts", "error_info", "worker_id"]


@dataclass(frozen=True, slots=True)
class WorkerParts:
    """The parts of one run, who holds whom: the claim loop holds the runner, the
    recorder and the finisher; the runner holds the recorder, the heartbeats and the
    process runs; the services hold what they watch (the run's state) and the recorder."""

    recorder: Recorder
    heartbeats: Heartbeats
    progress: ProgressWriter
    runner: Runner
    finisher: Finisher
    claims: ClaimLoop
    renewer: LeaseRenewer
    watchdog: Watchdog
    replayer: Replayer
    presence: Presence
    cancel_poll: CancelPoll


class Worker:
    """A worker bound to one :class:`~queue_core.Queue`.

    Args:
        queue: the queue whose tasks and storage the worker uses.
        queues: queue names to take jobs from (a list or a comma-separated string);
            default: every queue of a registered task, plus ``"default"``.
        slots: attempts run at once (default env ``QUEUE_CORE_WORKER_SLOTS``, else 8).
        prefetch: jobs claimed ahead of free slots, held until a slot frees (default env
            ``QUEUE_CORE_WORKER_PREFETCH``, else ``slots``; 0: claim for free slots only).
            A held job's lease is renewed like a running one; its attempt's start time,
            timeout and heartbeat bound count from its body's start; a stopping worker
            gives held jobs back at once without spending an attempt. Only on a storage
            with ``SupportsPrefetch`` (the others claim for free slots only).
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
            through (default: the queue's clock, a :class:`~queue_core.app.clock.SystemClock`
            unless the queue was given another).
        listeners: :class:`~queue_core.app.events.WorkerListener` objects told of the
            worker's start and stop and of every attempt's start and end, after those
            registered on the queue (``queue.add_worker_listener``).
        presence_ttl: how long the worker's record in storage (``queue-core workers``)
            stays live without a refresh; refreshed every third of it (default env
            ``QUEUE_CORE_WORKER_TTL``, else 15 s). A killed worker drops out after it.
        scheduler: run the scheduler of the queue's periodic tasks
            (:mod:`queue_core.worker.scheduler`; default on, never in a burst worker).
        flow_dirs: directories whose ``type: script`` flow steps this worker may run
            (their files at any depth; default env ``QUEUE_CORE_WORKER_FLOW_DIRS``,
            ``os.pathsep``-separated, else the worker's project: its working directory
            unless that is ``/``, and the directories of the flow files its application
            loaded; a script elsewhere is refused with reason ``not_allowed``). See
            :mod:`queue_core.app.steps.gate`.
        http_hosts: hosts this worker's ``type: http`` flow steps may reach (a name or an
            address, ``*.example.com``, ``*`` for any; default env
            ``QUEUE_CORE_WORKER_HTTP_HOSTS``, comma-separated, else any host).
        app: how this worker's queue was found (``tasks:queue``, the CLI's ``APP``):
            named in the start line and in an ``unknown_task`` dead letter's error.
        log_tracebacks: log a failed attempt's traceback after its line: ``"dead"``
            (default) when the job is dead-lettered, ``"all"`` for every failed or
            timed-out attempt, ``"none"`` never. The traceback is always recorded with
            the attempt (``queue-core jobs show``).
    """

    def __init__(
        self,
        queue: WorkerHost,
        *,
        queues: Sequence[str] | str | None = None,
        slots: int | None = None,
        prefetch: int | None = None,
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
        flow_dirs: Sequence[str | os.PathLike[str]] | str | None = None,
        http_hosts: Sequence[str] | str | None = None,
        log_tracebacks: str = "dead",
        app: str | None = None,
    ) -> None:
        self.queue, self.app = queue, app
        self._gate = step_gate(flow_dirs, http_hosts)
        self.log_tracebacks = check_log_tracebacks(log_tracebacks)
        self.presence_ttl_ms = presence_ttl_ms(presence_ttl)
        burst = check_flag(burst, "burst")
        self.scheduler = check_flag(scheduler, "scheduler") and not burst
        self._scheduler: Scheduler | None = None
        self.isolation = check_isolation(isolation) if isolation is not None else "thread"
        self.max_tasks_per_child = check_max_tasks_per_child(max_tasks_per_child)
        self.storage = queue.storage()
        slots = check_slots(slots)
        self._explicit_queues = check_queues(queues)
        self.slots = slots
        self.burst = burst
        self.reap_interval = parse_duration(reap_interval, field="reap_interval")
        self.lease = parse_duration(lease, field="lease") if lease is not None else queue.lease
        self.lease_ms = to_ms(self.lease)
        self.shutdown_grace = parse_duration(shutdown_grace, field="shutdown_grace")
        self.install_signal_handlers = install_signal_handlers
        self.id = worker_id()
        replacements = slots if max_replacement_slots is None else max_replacement_slots
        self._timing = Timing(clock if clock is not None else queue.clock)
        self.prefetch = check_prefetch(prefetch, slots)
        self._state = RunState(slots, replacements, self.prefetch)  # what the parts share
        self._listeners = Listeners((*queue.worker_listeners, *listeners), self.id)
        """``Queue.worker_listeners`` then the worker's own (``Worker(listeners=...)``)."""
        self._outage = Outage(self._timing.monotonic)
        """Storage outages: one WARNING when one starts, one INFO when it ends."""
        self._retries_due = DueTimes(self._timing.pacing.monotonic)
        """Retries this worker scheduled: they bound the claim thread's idle wait."""
        self._flush_backoff = Backoff()  # per worker: one worker's outage is not another's
        self._serializer = queue.serializer
        self._rng = random.random
        self._parts: WorkerParts | None = None
        """The parts of the current (or last) run."""

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
        self._state.stop.set()
        self._interrupt_wait()

    def _interrupt_wait(self) -> None:
        """End the claim thread's idle wait now, where the storage can
        (:class:`~queue_core.storage.abilities.SupportsWaitInterrupt`): a stop asked of an
        idle worker takes effect at once, not at the end of the wait (up to a second)."""
        storage = self.storage
        if isinstance(storage, SupportsWaitInterrupt):
            storage.interrupt_waits()

    def stats(self) -> dict[str, Any]:
        """Worker-local figures: slots, running and stuck attempts, processed count."""
        state, parts = self._state, self._parts
        table = state.table
        return {
            "worker_id": self.id,
            "slots": self.slots,
            "running": len(table.running),
            "stuck": table.stuck,
            "free": table.free(),
            "prefetched": len(state.held),
            "processed": state.processed + (0 if parts is None else parts.recorder.released_count),
            "buffered_ends": len(state.ends) + (0 if parts is None else parts.finisher.unwritten()),
        }

    # ------------------------------------------------------------------ assembly

    def _assemble(
        self,
        tg: anyio.abc.TaskGroup,
        queues: list[str],
        tasks: dict[str, Task[Any, Any]],
        limiter: anyio.CapacityLimiter,
        first_claim: FirstClaim,
    ) -> WorkerParts:
        """The parts of one run, on its event loop (they start threads that report to
        it), inside its task group ``tg``."""
        state, storage, timing, outage = self._state, self.storage, self._timing, self._outage
        pacing = timing.pacing  # progress writes are I/O pacing (timing.py)
        progress = ProgressWriter(storage, lambda: int(pacing.monotonic() * 1000))
        recorder = self._recorder(progress)
        heartbeats = Heartbeats(state, storage, timing, outage, limiter)
        finisher = Finisher(state, storage, recorder, timing, outage, self._flush_backoff)
        runner = Runner(
            run=state,
            recorder=recorder,
            heartbeats=heartbeats,
            progress=progress,
            listeners=self._listeners,
            timing=timing,
            storage=storage,
            serializer=self._serializer,
            tasks=tasks,
            gate=self._gate,
            isolation=self.isolation,
            max_tasks_per_child=self.max_tasks_per_child,
            limiter=limiter,
            tg=tg,
            on_delivery=(finisher.delivery_begins, finisher.delivery_ended),
        )
        replayer = Replayer(storage, tasks, timing, limiter)
        claims = self._claim_loop(runner, finisher, queues, limiter, first_claim, replayer)
        presence = Presence(
            storage, self.id, queues, state.table, self.presence_ttl_ms, timing, outage, limiter
        )
        return WorkerParts(
            recorder=recorder,
            heartbeats=heartbeats,
            progress=progress,
            runner=runner,
            finisher=finisher,
            claims=claims,
            renewer=LeaseRenewer(
                state,
                storage,
                self.lease,
                self.lease_ms,
                timing,
                outage,
                limiter,
                on_held=claims.held_renewed,
            ),  # fmt: skip
            watchdog=Watchdog(state, recorder, timing),
            replayer=replayer,
            presence=presence,
            cancel_poll=CancelPoll(storage, state.table, timing, outage, limiter),
        )

    def _recorder(self, progress: ProgressWriter) -> Recorder:
        """The run's recorder: ends buffered for the finisher, ``progress`` told of each
        end that carries a report."""
        return Recorder(
            worker_id=self.id,
            storage=self.storage,
            serializer=self._serializer,
            timing=self._timing,
            listeners=self._listeners,
            put=self._state.put_end,
            retries_due=self._retries_due,
            progress_done=progress.forget,
            log_tracebacks=self.log_tracebacks,
            rng=self._rng,
        )

    def _claim_loop(
        self,
        runner: Runner,
        finisher: Finisher,
        queues: list[str],
        limiter: anyio.CapacityLimiter,
        first_claim: FirstClaim,
        replayer: Replayer,
    ) -> ClaimLoop:
        """The run's claim loop, holding ``runner`` (and its recorder) and ``finisher``."""
        return ClaimLoop(
            run=self._state,
            runner=runner,
            recorder=runner.recorder,
            finisher=finisher,
            listeners=self._listeners,
            storage=self.storage,
            worker_id=self.id,
            app=self.app,
            declared=self.queue.tasks,
            queues=queues,
            lease_ms=self.lease_ms,
            burst=self.burst,
            timing=self._timing,
            outage=self._outage,
            retries_due=self._retries_due,
            limiter=limiter,
            first_claim=first_claim,
            replayer=replayer,
        )

    # ------------------------------------------------------------------ main

    async def run_async(self) -> None:
        """The worker's task group (use :meth:`run` from sync code)."""
        queues = self.queues
        tasks = {**file_step_tasks(self.queue), **self.queue.tasks}
        self._state.on_loop()
        limiter, first_claim = anyio.CapacityLimiter(8), FirstClaim()
        log.info("%s", self._banner(queues))
        self._listeners.notify("worker_started", self)
        async with anyio.create_task_group() as tg:
            parts = self._parts = self._assemble(tg, queues, tasks, limiter, first_claim)
            freeze_start_heap()
            await self._start_services(tg, parts, tasks, limiter, first_claim)
            await parts.claims.claim_loop()
            await self._shutdown(parts)
            tg.cancel_scope.cancel()
        await parts.presence.deregister()
        parts.progress.close()
        parts.claims.close()
        parts.finisher.close()
        await parts.runner.aclose()
        released = parts.recorder.released_count
        n = self._state.processed + released
        said = f" ({released} released for retry)" if released else ""
        log.info("worker %s stopped after %d attempt%s%s", self.id, n, "" if n == 1 else "s", said)
        self._listeners.notify("worker_stopped", self)

    async def _start_services(
        self,
        tg: anyio.abc.TaskGroup,
        parts: WorkerParts,
        tasks: dict[str, Task[Any, Any]],
        limiter: anyio.CapacityLimiter,
        first_claim: FirstClaim,
    ) -> None:
        """Start the services in ``tg``; those that call storage first wait for the first
        claim (:mod:`~queue_core.worker.startup`)."""
        tg.start_soon(parts.finisher.hand_over)
        claims = parts.claims
        if claims.ahead:
            tg.start_soon(claims.ahead_loop)
            release = lambda job: claims.recorder.released(claims.unstarted(job))  # noqa: E731
            tg.start_soon(watch_pauses, self.storage, claims.held, limiter, release)
        tg.start_soon(parts.renewer.renew_loop)
        tg.start_soon(parts.heartbeats.run_writer)
        tg.start_soon(parts.watchdog.watch)
        tg.start_soon(after_first_claim, first_claim, parts.presence.keep_up)
        tg.start_soon(parts.cancel_poll.poll)
        reaper = functools.partial(
            reaper_loop, outage=self._outage, hold=_reap_hold(self.lease, tasks)
        )
        args = (self.storage, self.reap_interval, limiter, self._timing, parts.replayer.replay_pass)
        tg.start_soon(after_first_claim, first_claim, reaper, *args)
        if self.scheduler:
            from queue_core.worker.scheduler import scheduler_for  # not in burst

            self._scheduler = scheduler_for(
                self.queue, self.storage, self._timing, limiter, self._outage
            )
            if self._scheduler is not None:
                await tg.start(self._scheduler.run)
        if self.install_signal_handlers and threading.current_thread() is threading.main_thread():
            await tg.start(self._signal_watcher)

    async def _shutdown(self, parts: WorkerParts) -> None:
        """Give running attempts ``shutdown_grace`` (clock seconds), then release them."""
        state, timing = self._state, self._timing
        table = state.table
        began = timing.monotonic()
        while table.busy() > 0 and any(not a.ended for a in table.running.values()):
            # read each time: a second signal sets the grace to 0 (and wakes this wait)
            left = began + self.shutdown_grace - timing.monotonic()
            if left <= 0:
                break
            state.slot_wake = anyio.Event()
            await timing.wait(state.slot_wake, left)
        for att in list(table.running.values()):
            if att.ended:
                continue
            parts.recorder.released(att)  # logged there, in one line
            att.stop()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.shutdown_grace + 10.0):
            await parts.finisher.flush_all()

    def _request_stop(self) -> None:
        self._state.request_stop()
        self._interrupt_wait()

    def _banner(self, queues: Sequence[str]) -> str:
        """The start line, and one line per registered task (as Celery's banner)."""
        queue = self.queue
        where = mask_url(queue.url) if queue.url else type(self.storage).__name__
        tasks = sorted(queue.tasks.values(), key=lambda t: t.name)
        app = f" app {self.app}," if self.app else ""
        lines = [
            f"worker {self.id} starting:{app} storage {where}, queues {', '.join(queues)}, "
            f"slots {self.slots}, scheduler {'on' if self.scheduler else 'off'}, "
            f"{len(tasks)} task{'' if len(tasks) == 1 else 's'}"
            + (":" if tasks else " (it runs the script steps of flow files)")
        ]
        lines += [f"  {t.name} (queue {t.queue_name})" for t in tasks]
        return "\n".join(lines)

    async def _signal_watcher(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                if self._state.stopping:
                    log.warning("second signal %s: releasing running attempts now", signum)
                    self.shutdown_grace = 0.0
                else:
                    log.info("signal %s: stopping (grace %.1f s)", signum, self.shutdown_grace)
                self._request_stop()


def _reap_hold(lease: float, tasks: dict[str, Task[Any, Any]]) -> float:
    """How long the reaper holds off after a storage outage: the longer of the lease and
    the longest heartbeat of this worker's tasks (see ``worker/outage.py``)."""
    beats = [t.heartbeat for t in tasks.values() if t.heartbeat]
    return max([lease, *beats])

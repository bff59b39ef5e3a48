"""The claim loop: claims up to the free-slot count in one call and starts what it got.

On a storage with push wake-ups an idle worker blocks in ``wait_for_jobs`` on the claim
thread (a :class:`~queue_core.worker.threads.StorageThread`) and claims from there as
soon as it wakes; plain sync bodies claimed so start on a body thread without a loop round
trip (:meth:`ClaimLoop._start_direct`), every other job on the loop (:meth:`ClaimLoop._start`)
through the :class:`~queue_core.worker.running.Runner`. A burst worker's loop ends once
nothing is left (:meth:`ClaimLoop._burst_done`). With ``prefetch`` (``SupportsPrefetch``)
:meth:`ClaimLoop.ahead_loop` claims ahead while every slot is busy; held jobs start as
slots free (:mod:`.prefetch`).

The claim loop's own pauses (poll and storage-error back-off) are I/O pacing on the event
loop's timer, not service timing: neither they nor the claim thread's wait for storage
(bounded by a retry's due time, on the pacing clock: :mod:`queue_core.worker.timing`) run
on the worker's clock. Its readings (claim times) are the clock's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import anyio
from anyio import to_thread

from queue_core.app.task import Task
from queue_core.records.errors import ConfigError, StorageError
from queue_core.records.jobs import ClaimedJob, Reason, RenewResult
from queue_core.storage.abilities import SupportsPrefetch, SupportsWaitClaim, SupportsWakeup
from queue_core.storage.protocol import Storage
from queue_core.worker.finishing import Finisher
from queue_core.worker.listeners import Listeners
from queue_core.worker.log import log
from queue_core.worker.outage import Outage
from queue_core.worker.prefetch import give_back
from queue_core.worker.ratestart import started_late
from queue_core.worker.reaper import Backoff
from queue_core.worker.recording import Recorder, error_info
from queue_core.worker.replay import Replayer
from queue_core.worker.running import Runner
from queue_core.worker.scopes import scoped
from queue_core.worker.slots import Attempt
from queue_core.worker.startup import FirstClaim
from queue_core.worker.state import RunState
from queue_core.worker.threads import StorageThread, body_call
from queue_core.worker.timing import DueTimes, Timing
from queue_core.worker.watchdog import deadline_of

__all__ = ["BURST_HORIZON_MS", "ClaimLoop", "unknown_task_message"]

BURST_HORIZON_MS: Final = 60_000
_POLL_MIN: Final = 0.001
_POLL_MAX: Final = 0.008
_WAKEUP_WAIT: Final = 1.0
_GATHER_WAIT: Final = 0.002  # busy: how long a claim may wait for more free slots
_AHEAD_PAUSE_MIN: Final = 0.005  # a claim ahead that found too few: the first pause ...
_AHEAD_PAUSE_MAX: Final = 0.5  # ... doubling up to this

_Direct = tuple[Attempt, Task[Any, Any], tuple[Any, ...], dict[str, Any]]


class _ClaimState:
    """The claim loop's pacing: poll interval, storage back-off, idle flag."""

    __slots__ = ("poll", "backoff", "idle", "waiting")

    def __init__(self) -> None:
        self.poll = _POLL_MIN
        self.backoff = Backoff()
        self.idle = False
        """The last claim found nothing: the next one waits for a wake-up first."""
        self.waiting = False
        """Burst: the last count found jobs pending (not ready): wait as long as idle."""

    def found(self) -> None:
        self.idle = self.waiting = False
        self.poll = _POLL_MIN


def unknown_task_message(
    name: str, worker: str, app: str | None, tasks: Mapping[str, object]
) -> str:
    """Why a worker dead-letters a job of task ``name`` (``unknown_task``): which app it
    imported and which tasks that app declares, and the two ways out."""
    known = sorted(tasks)
    shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
    where = f"app {app}" if app else "its Queue"
    return (
        f"unknown task {name!r}: worker {worker} imported {where}, which declares "
        f"{shown or 'no task'}; import the module that declares {name!r} in the app "
        f"module, or send it to a queue of its own that only workers knowing it take "
        f"(@queue.task(queue=...), queue-core worker --queues)"
    )


class ClaimLoop:
    """Takes jobs from storage and starts them (see the module doc); made on the run's
    event loop (its claim thread reports to it)."""

    def __init__(
        self,
        *,
        run: RunState,
        runner: Runner,
        recorder: Recorder,
        finisher: Finisher,
        listeners: Listeners,
        storage: Storage,
        worker_id: str,
        app: str | None,
        declared: Mapping[str, object],
        queues: Sequence[str],
        lease_ms: int,
        burst: bool,
        timing: Timing,
        outage: Outage,
        retries_due: DueTimes,
        limiter: anyio.CapacityLimiter,
        first_claim: FirstClaim,
        replayer: Replayer,
    ) -> None:
        self.run = run
        self.replayer = replayer
        self.runner = runner
        self.recorder = recorder
        self.finisher = finisher
        self.listeners = listeners
        self.storage = storage
        self.id = worker_id
        self.app = app
        self.declared = declared
        """The tasks the worker's queue declares (named when one is unknown)."""
        self.queues = list(queues)
        self.lease_ms = lease_ms
        self.burst = burst
        self.timing = timing
        self.outage = outage
        self.retries_due = retries_due
        self.limiter = limiter
        self.first_claim = first_claim
        self.wakeup = isinstance(storage, SupportsWakeup)
        self.held = run.held
        self.ahead = run.held.limit > 0 and isinstance(storage, SupportsPrefetch)
        """Claims run ahead of free slots (:meth:`ahead_loop`)."""
        self._ahead_wake = anyio.Event()
        self._ahead_done = anyio.Event()
        self.held_claim = False
        """The jobs :meth:`_claim` returned were claimed ahead, and are held."""
        self.claim_io = StorageThread("queue-core claim")
        self._burst_said: int | None = None
        self._writes_seen = 0
        """``Finisher.writes`` when the latest claim began (:meth:`_burst_done`)."""
        self.claim_began = self.ahead_began = self.ahead_took = 0.0
        """When the latest claim call (ahead: its storage call; ``ahead_took`` its length)
        began, pacing clock: rate-limited jobs start by a bound from it (``ratestart``)."""

    async def claim_loop(self) -> None:
        """Claim and start jobs until a stop is asked (or, in a burst, nothing is left)."""
        run, state, held = self.run, _ClaimState(), self.held
        while True:
            if run.stop.is_set():
                run.stopping = True
                await self._stop_ahead()
                return
            if held.jobs and run.table.free() > 0:
                self._start_held()
                continue
            free = await self._free_slots(state)
            if free <= 0:
                continue
            jobs = await self._claim(state, free)
            if jobs is None:
                continue
            if jobs:
                state.found()
                if self.held_claim:  # claimed ahead: the oldest held jobs start first
                    self.held_claim = False
                    self._start_held()
                else:
                    self._start_claimed(jobs)
                continue
            if self.burst and not run.table.running and not held.jobs:
                done = await self._burst_done()
                if done and await self._halt_ahead():
                    return
                if done is None:  # ends were written just now: claim what they released
                    state.idle = False
                    continue
                state.waiting = True
            await self._idle(state)

    def _start_claimed(self, jobs: list[ClaimedJob]) -> None:
        """Start the jobs a claim for free slots returned."""
        claimed_at = self.timing.monotonic()
        for job in jobs:
            self._start(job, claimed_at)

    async def _free_slots(self, state: _ClaimState) -> int:
        """Free slots to claim for (0 after waiting for one to free up)."""
        run = self.run
        table = run.table
        free = table.free()
        if free <= 0:
            run.slot_wake = run.new_event()
            with anyio.move_on_after(0.2):
                await run.slot_wake.wait()
            return 0
        half = (table.slots + 1) // 2
        if free < half and table.running and not state.idle:
            # Busy: let a few more slots free up so one claim fills several (each
            # claim is a write transaction with a fixed cost), but not for long.
            with anyio.move_on_after(_GATHER_WAIT):
                while free < half and table.running:
                    run.slot_wake = run.new_event()
                    await run.slot_wake.wait()
                    free = table.free()
            free = table.free()
        return free

    async def _claim(self, state: _ClaimState, free: int) -> list[ClaimedJob] | None:
        """Claim up to ``free`` jobs; ``None`` when the loop should start over."""
        self.claim_began = self.timing.pacing.monotonic()
        self._writes_seen = self.finisher.writes
        self.held_claim = False
        try:
            if state.idle and self.wakeup:
                longest = _WAKEUP_WAIT
                if self.run.table.running or (self.burst and not state.waiting):
                    # bodies run (or a burst may be done): wait as long as a poll would pause
                    longest, state.poll = state.poll, min(state.poll * 2, _POLL_MAX)
                started, jobs = await self.claim_io.call(self._wait_then_claim, free, longest)
                self.run.backlog = started + len(jobs) >= free
                if started:
                    state.found()
                    if not jobs:
                        return None
                return list(jobs)
            found: list[ClaimedJob]
            if self.ahead:  # one claim for the free slots and the jobs to hold
                want = free + self.held.want()
                found = await self.claim_io.call(self._claim_ahead, want)
                self.held.add(found, self.ahead_began, self.ahead_took)  # oldest first
                self.held_claim, backlog = True, len(found) >= want
            else:
                found = await self.claim_io.call(self._claim_now, free)
                backlog = len(found) >= free
        except StorageError as exc:
            state.idle = False
            delay = state.backoff.next()
            if not self.outage.failed("claim", exc):
                log.warning("claim failed (%s); retrying in %.2f s", exc, delay)
            await anyio.sleep(delay)
            return None
        finally:
            self.first_claim.done()  # the services' storage calls may start (startup.py)
        self.run.backlog = backlog
        state.backoff.reset()
        self.outage.ok()
        return found

    async def _idle(self, state: _ClaimState) -> None:
        """Nothing was claimed: wait for a wake-up next time, or poll.

        Also while bodies run, when the wait lasts at most the poll's pause (1 ms, then
        up to 8): the claims come no more often than the polls did, and a job enqueued
        meanwhile ends the wait at once on a storage that pushes wake-ups (where it used
        to wait for the rest of the pause). One that polls itself (PgBouncer, a short SQS receive)
        looks once per pause, as the claims did."""
        if self.wakeup:
            state.idle = True
            return
        state.idle = False
        await anyio.sleep(state.poll)
        state.poll = min(state.poll * 2, _POLL_MAX)

    def _claim_now(self, free: int) -> list[ClaimedJob]:
        """On the claim thread: claim up to ``free`` jobs, with their steps' inputs."""
        jobs = self.storage.claim(self.id, self.queues, free, self.lease_ms)
        if jobs:
            self.runner.prefetch(jobs)
        return jobs

    def _wait_then_claim(self, free: int, longest: float) -> tuple[int, list[ClaimedJob]]:
        """On the claim thread: wait for a wake-up (at most ``longest``), then claim.

        One hand-off to the claim thread instead of a wait on another thread, a loop
        wake-up and a second hand-off for the claim: the claim follows the wake-up on
        the same thread at once, and plain sync bodies start from here too (see
        :meth:`_start_direct`). Returns how many were started so, and the claimed jobs
        left for the loop to start. Nothing is claimed once a stop was requested before
        the wait (a batch claimed just before goes on through the normal shutdown path;
        so does one a ``SupportsWaitClaim`` storage claims right after a wait during
        which the stop came), and the wait is short, so shutdown waits for at most one
        ``_WAKEUP_WAIT``.
        """
        stop = self.run.stop
        if stop.is_set():
            return 0, []
        # a retry this worker scheduled wakes no one when it falls due: wait until then
        wait = self.retries_due.wait_bound(longest)
        storage: Any = self.storage
        if isinstance(storage, SupportsWaitClaim):  # the wait and the claim in one call
            jobs = self._waited(
                storage.wait_and_claim, self.id, self.queues, free, self.lease_ms, wait
            )
            if jobs is None:
                return 0, []
        else:
            if wait > 0 and self._waited(storage.wait_for_jobs, self.queues, wait) is None:
                return 0, []
            if stop.is_set():
                return 0, []
            jobs = storage.claim(self.id, self.queues, free, self.lease_ms)
        self.outage.ok()
        if not jobs:
            return 0, []
        self.runner.prefetch(jobs)
        return self._start_direct(jobs)

    def _waited(self, wait: Callable[..., Any], *args: Any) -> Any:
        """On the claim thread: ``wait(*args)`` (a wake-up wait), or ``None`` when it
        failed, after saying so and pausing briefly."""
        try:
            return wait(*args)
        except StorageError as exc:
            if not self.outage.failed("wait_for_jobs", exc):
                log.warning("wait_for_jobs failed (%s)", exc)
            self.run.stop.wait(0.1)
            return None

    def _direct_attempt(self, job: ClaimedJob) -> _Direct | None:
        """On the claim thread: the attempt for a plain sync body, or ``None`` when the
        job must go through the loop (async, per-call options, bad payload)."""
        runner = self.runner
        task = runner.tasks.get(job.task_name)
        if (
            task is None
            or task.is_async
            or job.options
            or job.execution_id is not None  # a flow step's call is read from storage
            or started_late(job, self.claim_began, self.timing.pacing)  # the loop gives it back
        ):
            return None
        try:
            args, kwargs = runner.serializer.loads_payload(job.payload)
        except Exception:  # noqa: BLE001 - the loop records the bad payload
            return None
        if runner.misfit(task, args, kwargs) is not None:
            return None  # the loop dead-letters it
        att = Attempt(job, task)
        if job.heartbeat_ms:  # storage counts silence from the claim
            att.last_beat = self.timing.clock.monotonic()
        if runner.isolation_of(task) == "process":  # the call's deadline counts from now
            att.mode, att.claimed_at = "process", self.timing.monotonic()
        elif task.takes_ctx:
            kwargs["ctx"] = runner.context(att, loop=False)
        return att, task, args, kwargs

    def _start_direct(self, jobs: list[ClaimedJob]) -> tuple[int, list[ClaimedJob]]:
        """On the claim thread: start plain sync bodies straight on a body thread,
        without a loop round trip; every other job is returned for :meth:`_start`.

        The attempts are registered on the loop by a call announced to the body threads
        *before* their bodies are handed over (:meth:`BodyThreads.announce`): it travels
        in the same ordered list as the ends, so the loop records them (slot, claim
        time, deadline) before it takes any of their ends, even when those ride along
        with a delivery scheduled earlier; and before the claim returns to the loop.
        The loop is woken for that call only once the bodies are handed over, so the
        bodies do not wait for the GIL while the loop registers them.
        """
        direct: list[_Direct] = []
        rest: list[ClaimedJob] = []
        for job in jobs:
            found = self._direct_attempt(job)
            if found is None:
                rest.append(job)
            else:
                direct.append(found)
        if not direct:
            return 0, rest
        runner = self.runner
        dumps, listeners, process = (
            runner.serializer.dumps_result,
            self.listeners.all,
            runner.process,
        )
        bodies = [
            (
                att,
                process.call(att, task, args, kwargs)
                if att.mode == "process"
                else body_call(dumps, scoped(listeners, att.job, task.func), args, kwargs),
            )
            for att, task, args, kwargs in direct
        ]
        register = functools.partial(self._register_direct, [d[0] for d in direct])
        runner.threads.announce(register, then=bodies)  # the bodies start, then the loop wakes
        return len(direct), rest

    def _register_direct(self, atts: list[Attempt]) -> None:
        """On the loop: record attempts whose bodies the claim thread started."""
        claimed_at = self.timing.monotonic()
        table, listeners = self.run.table, self.listeners
        for att in atts:
            att.claimed_at = claimed_at
            att.deadline = deadline_of(att)
            table.add(att)
            if listeners.all:
                listeners.started(att)

    def _start(
        self, job: ClaimedJob, claimed_at: float | None = None, held: tuple[float, float] = (0, 0)
    ) -> None:
        """Start ``job`` in a slot (``held``: its claim's start and length; else latest)."""
        runner = self.runner
        task = runner.tasks.get(job.task_name)
        att = Attempt(job, task, held[0])  # held: its clock counts since its claim
        att.claimed_at = self.timing.monotonic() if claimed_at is None else claimed_at
        att.claim_took = held[1]
        if job.heartbeat_ms:  # storage counts silence from the claim
            att.last_beat = self.timing.monotonic()
        self.run.table.add(att)
        if self.listeners.all:
            self.listeners.started(att)
        if started_late(job, held[0] or self.claim_began, self.timing.pacing):
            self.recorder.start_late(att)
            self.run.free(att)
            return
        if task is None:
            exc = ConfigError(
                unknown_task_message(job.task_name, self.id, self.app, self.declared),
                code="unknown_task",
                field="task_name",
                value=job.task_name,
            )
            self.recorder.dead(att, Reason.UNKNOWN_TASK, error_info(exc))
            self.run.free(att)
            return
        if job.execution_id is not None and runner.direct_step(job, task):
            runner.start_step_thread(att, task)
        elif task.is_async or job.options or job.execution_id is not None:
            runner.spawn(att)
        elif runner.isolation_of(task) == "process":
            runner.start_process(att, task)
        else:
            runner.start_thread(att, task)

    # ------------------------------------------------------------------ prefetch

    async def ahead_loop(self) -> None:
        """Claim ahead of free slots while every slot is busy and at least half of
        ``prefetch`` may be held; until a stop (then :meth:`_stop_ahead` gives back what
        is held). A claim that found fewer than it asked for is tried again after a pause
        that doubles from 5 ms to 0.5 s (I/O pacing, as the claim loop's polls)."""
        run, held, table = self.run, self.held, self.run.table
        backoff, pause = Backoff(), _AHEAD_PAUSE_MIN
        try:
            while self.ahead and not run.stopping:
                want = held.want()
                if want < max(1, held.limit // 2) or table.free() > 0:
                    self._ahead_wake = run.new_event()
                    with anyio.move_on_after(0.2):
                        await self._ahead_wake.wait()
                    continue
                try:
                    jobs = await self.claim_io.call(self._claim_ahead, want)
                except StorageError as exc:
                    if not self.outage.failed("claim", exc):
                        log.warning("claim ahead failed (%s)", exc)
                    await anyio.sleep(backoff.next())
                    continue
                backoff.reset()
                run.backlog = len(jobs) >= want
                if jobs:
                    held.add(jobs, self.ahead_began, self.ahead_took)
                    run.slot_wake.set()  # a slot that freed meanwhile takes one now
                if run.backlog:
                    pause = _AHEAD_PAUSE_MIN
                    continue
                self._ahead_wake = run.new_event()
                with anyio.move_on_after(pause):
                    await self._ahead_wake.wait()
                pause = min(2 * pause, _AHEAD_PAUSE_MAX)
        finally:
            self._ahead_done.set()

    def _claim_ahead(self, want: int) -> list[ClaimedJob]:
        """On the claim thread: claim up to ``want`` jobs ahead, with their steps' inputs."""
        storage: Any = self.storage
        self.ahead_began = self.timing.pacing.monotonic()  # not the hand-off to this thread
        jobs: list[ClaimedJob] = storage.claim_ahead(self.id, self.queues, want, self.lease_ms)
        self.ahead_took = self.timing.pacing.monotonic() - self.ahead_began
        if jobs:
            self.runner.prefetch(jobs)
        return jobs

    def _start_held(self) -> None:
        """Start held jobs in the free slots; storage learns of their start with the next
        ends written, before them (:meth:`~.finishing.FinishThread.put_starts`)."""
        taken = self.held.take(self.run.table.free())
        claimed_at = self.timing.monotonic()
        for job, began, took in taken:
            self._start(job, claimed_at, (began, took))
        self.finisher.io.put_starts([(job.ref, claimed_at) for job, *_ in taken])
        self._ahead_wake.set()

    def held_renewed(self, res: RenewResult) -> None:
        """On the loop, after a renewal of the held leases among others: a held job whose
        lease was lost is dropped; one with a cancel request ends ``cancelled`` unstarted."""
        held = self.held
        if not held.jobs:
            return
        held.drop(set(res.lost))
        for job in held.drop(set(res.cancel_requested)):
            att = self.unstarted(job)
            att.cancel_requested = True
            self.recorder.stopped_end(att)

    async def _halt_ahead(self) -> bool:
        """End :meth:`ahead_loop` (after a claim in flight); whether nothing is held."""
        if self.ahead:
            self.ahead = False
            self._ahead_wake.set()
            await self._ahead_done.wait()
        return not self.held.jobs

    async def _stop_ahead(self) -> None:
        """The worker stops: wait for a claim ahead in flight, then give back every held
        job, unstarted (:func:`give_back`) or released: other workers may take them now."""
        await self._halt_ahead()
        for job in await give_back(self.storage, self.held.take_all(), self.limiter):
            self.recorder.released(self.unstarted(job))

    def unstarted(self, job: ClaimedJob) -> Attempt:
        """The attempt of a held job that ends without a body (never in a slot)."""
        att = Attempt(job, self.runner.tasks.get(job.task_name))
        att.claimed_at = self.timing.monotonic()
        return att

    def close(self) -> None:
        """After the run: let the claim thread end."""
        self.claim_io.close()

    # ------------------------------------------------------------------ burst

    async def _burst_done(self) -> bool | None:
        """Burst, nothing running and nothing claimed: whether nothing is left. ``None``
        when ends were written since the claim began (or wait to be: they are written
        first): a flow step's end releases the next step, so the loop claims again
        before it counts what is pending."""
        await self.finisher.flush_all()
        if self.finisher.writes != self._writes_seen:
            return None
        try:
            pending = await self._count_pending(BURST_HORIZON_MS)
        except StorageError as exc:
            if not self.outage.failed("count_pending", exc):
                log.warning("count_pending failed (%s)", exc)
            return False
        if pending == 0 and not self.run.table.running:  # dead letters due for auto-replay?
            return await self.replayer.burst_end(BURST_HORIZON_MS, self.outage, self.id)
        await self._say_waiting(pending)
        return False

    async def _count_pending(self, horizon_ms: int) -> int:
        n: int = await to_thread.run_sync(
            self.storage.count_pending, self.queues, horizon_ms, limiter=self.limiter
        )
        return n

    async def _say_waiting(self, pending: int) -> None:
        """Burst: say (INFO) what the worker is waiting for, once per change of the
        number of jobs it waits for (not as the due time draws nearer)."""
        if pending == self._burst_said:
            return
        self._burst_said = pending
        if await self._count_pending(0):
            text = f"burst: waiting for {pending} job(s) running or held back"
        else:
            due = f"due in {await self._first_due_ms() / 1000:.0f} s"
            text = (
                f"burst: waiting for 1 job {due}"
                if pending == 1
                else f"burst: waiting for {pending} jobs, the first {due}"
            )
        log.info("%s", text, extra={"event": {"event": "burst_waiting", "worker_id": self.id}})

    async def _first_due_ms(self) -> int:
        """When the first pending job is due (ms from now, to the second): a bisection
        of ``count_pending`` horizons within ``BURST_HORIZON_MS``."""
        low, high = 0, BURST_HORIZON_MS
        while high - low > 1000:
            mid = (low + high) // 2
            if await self._count_pending(mid):
                high = mid
            else:
                low = mid
        return high

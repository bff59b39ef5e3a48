"""Claiming: the claim loop, wait-then-claim on the claim thread, direct starts.

The claim loop claims up to the free-slot count in one call. On a storage with push
wake-ups an idle worker blocks in ``wait_for_jobs`` on the claim thread and claims
from there as soon as it wakes; plain sync bodies claimed so start on a body thread
without a loop round trip (:meth:`Claiming._start_direct`).

The claim loop's own pauses (poll back-off, storage-error back-off) are I/O pacing on
the event loop's timer, not service timing: they do not run on the worker's clock.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Final

import anyio
from anyio import to_thread

from queue_core.errors import ConfigError, StorageError
from queue_core.model import ClaimedJob, Reason
from queue_core.storage import SupportsWaitClaim
from queue_core.task import Task
from queue_core.worker.log import log
from queue_core.worker.process_start import ProcessStarts
from queue_core.worker.reaper import Backoff
from queue_core.worker.recording import error_info
from queue_core.worker.scopes import scoped
from queue_core.worker.services import deadline_of
from queue_core.worker.slots import Attempt
from queue_core.worker.threads import body_call

__all__ = ["BURST_HORIZON_MS", "Claiming"]

BURST_HORIZON_MS: Final = 60_000
_POLL_MIN: Final = 0.001
_POLL_MAX: Final = 0.008
_WAKEUP_WAIT: Final = 1.0
_GATHER_WAIT: Final = 0.002  # busy: how long a claim may wait for more free slots

_Direct = tuple[Attempt, Task[Any, Any], tuple[Any, ...], dict[str, Any]]


class _ClaimState:
    """The claim loop's pacing: poll interval, storage back-off, idle flag."""

    __slots__ = ("poll", "backoff", "idle")

    def __init__(self) -> None:
        self.poll = _POLL_MIN
        self.backoff = Backoff()
        self.idle = False
        """The last claim found nothing: the next one waits for a wake-up first."""

    def found(self) -> None:
        self.idle = False
        self.poll = _POLL_MIN


class Claiming(ProcessStarts):
    """Takes jobs from storage and starts them."""

    _backlog = False
    """The last claim took as many jobs as it asked for: more are waiting, so more ends
    are coming soon (the finish thread may gather them, see ``Worker._may_gather``)."""

    async def _claim_loop(self) -> None:
        state = _ClaimState()
        while True:
            if self._stop.is_set():
                self._stopping = True
                return
            free = await self._free_slots(state)
            if free <= 0:
                continue
            jobs = await self._claim(state, free)
            if jobs is None:
                continue
            if jobs:
                state.found()
                claimed_at = self._timing.monotonic()
                for job in jobs:
                    self._start(job, claimed_at)
                continue
            if self.burst and not self._table.running and await self._burst_done():
                return
            await self._idle(state)

    async def _free_slots(self, state: _ClaimState) -> int:
        """Free slots to claim for (0 after waiting for one to free up)."""
        table = self._table
        free = table.free()
        if free <= 0:
            self._slot_wake = self._event()
            with anyio.move_on_after(0.2):
                await self._slot_wake.wait()
            return 0
        half = (self.slots + 1) // 2
        if free < half and table.running and not state.idle:
            # Busy: let a few more slots free up so one claim fills several (each
            # claim is a write transaction with a fixed cost), but not for long.
            with anyio.move_on_after(_GATHER_WAIT):
                while free < half and table.running:
                    self._slot_wake = self._event()
                    await self._slot_wake.wait()
                    free = table.free()
            free = table.free()
        return free

    async def _claim(self, state: _ClaimState, free: int) -> list[ClaimedJob] | None:
        """Claim up to ``free`` jobs; ``None`` when the loop should start over."""
        try:
            if state.idle and self._wakeup:
                longest = _WAKEUP_WAIT
                if self._table.running:  # bodies run: wait as long as a poll would pause
                    longest, state.poll = state.poll, min(state.poll * 2, _POLL_MAX)
                started, jobs = await self._claim_io.call(self._wait_then_claim, free, longest)
                self._backlog = started + len(jobs) >= free
                if started:
                    state.found()
                    if not jobs:
                        return None
                return list(jobs)
            found: list[ClaimedJob] = await self._claim_io.call(
                self.storage.claim, self.id, self._queues, free, self.lease_ms
            )
        except StorageError as exc:
            state.idle = False
            delay = state.backoff.next()
            if not self._outage.failed("claim", exc):
                log.warning("claim failed (%s); retrying in %.2f s", exc, delay)
            await anyio.sleep(delay)
            return None
        self._backlog = len(found) >= free
        state.backoff.reset()
        self._outage.ok()
        return found

    async def _idle(self, state: _ClaimState) -> None:
        """Nothing was claimed: wait for a wake-up next time, or poll.

        Also while bodies run, when the wait lasts at most the poll's pause (1 ms, then
        up to 8): the claims come no more often than the polls did, and a job enqueued
        meanwhile ends the wait at once on a storage that pushes wake-ups (where it used
        to wait for the rest of the pause). One that polls itself (PgBouncer, a short SQS receive)
        looks once per pause, as the claims did."""
        if self._wakeup:
            state.idle = True
            return
        state.idle = False
        await anyio.sleep(state.poll)
        state.poll = min(state.poll * 2, _POLL_MAX)

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
        stop = self._stop
        if stop.is_set():
            return 0, []
        # a retry this worker scheduled wakes no one when it falls due: wait until then
        wait = self._retries_due.wait_bound(time.monotonic(), longest)
        storage: Any = self.storage
        if isinstance(storage, SupportsWaitClaim):  # the wait and the claim in one call
            jobs = self._waited(
                storage.wait_and_claim, self.id, self._queues, free, self.lease_ms, wait
            )
            if jobs is None:
                return 0, []
        else:
            if wait > 0 and self._waited(storage.wait_for_jobs, self._queues, wait) is None:
                return 0, []
            if stop.is_set():
                return 0, []
            jobs = storage.claim(self.id, self._queues, free, self.lease_ms)
        self._outage.ok()
        if not jobs:
            return 0, []
        return self._start_direct(jobs)

    def _waited(self, wait: Callable[..., Any], *args: Any) -> Any:
        """On the claim thread: ``wait(*args)`` (a wake-up wait), or ``None`` when it
        failed, after saying so and pausing briefly."""
        try:
            return wait(*args)
        except StorageError as exc:
            if not self._outage.failed("wait_for_jobs", exc):
                log.warning("wait_for_jobs failed (%s)", exc)
            self._stop.wait(0.1)
            return None

    def _direct_attempt(self, job: ClaimedJob) -> _Direct | None:
        """On the claim thread: the attempt for a plain sync body, or ``None`` when the
        job must go through the loop (async, per-call options, bad payload)."""
        task = self._tasks.get(job.task_name)
        if (
            task is None
            or task.is_async
            or job.options
            or job.execution_id is not None  # a flow step's call is read from storage
        ):
            return None
        try:
            args, kwargs = self._serializer.loads_payload(job.payload)
        except Exception:  # noqa: BLE001 - the loop records the bad payload
            return None
        if self._misfit(task, args, kwargs) is not None:
            return None  # the loop dead-letters it
        att = Attempt(job, task)
        if job.heartbeat_ms:  # storage counts silence from the claim
            att.last_beat = self._timing.clock.monotonic()
        if self._isolation(task) == "process":  # the call's deadline counts from now
            att.mode, att.claimed_at = "process", self._timing.monotonic()
        elif task.takes_ctx:
            kwargs["ctx"] = self._context(att, loop=False)
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
        dumps, listeners = self._serializer.dumps_result, self._listeners
        bodies = [
            (
                att,
                self._process_call(att, task, args, kwargs)
                if att.mode == "process"
                else body_call(dumps, scoped(listeners, att.job, task.func), args, kwargs),
            )
            for att, task, args, kwargs in direct
        ]
        register = functools.partial(self._register_direct, [d[0] for d in direct])
        self._threads.announce(register, then=bodies)  # the bodies start, then the loop wakes
        return len(direct), rest

    def _register_direct(self, atts: list[Attempt]) -> None:
        """On the loop: record attempts whose bodies the claim thread started."""
        claimed_at = self._timing.monotonic()
        table = self._table
        for att in atts:
            att.claimed_at = claimed_at
            att.deadline = deadline_of(att)
            table.add(att)
            if self._listeners:
                self._started(att)

    def _start(self, job: ClaimedJob, claimed_at: float | None = None) -> None:
        task = self._tasks.get(job.task_name)
        att = Attempt(job, task)
        att.claimed_at = self._timing.monotonic() if claimed_at is None else claimed_at
        if job.heartbeat_ms:  # storage counts silence from the claim
            att.last_beat = self._timing.monotonic()
        self._table.add(att)
        if self._listeners:
            self._started(att)
        if task is None:
            exc = ConfigError(
                f"unknown task {job.task_name!r}: not registered on worker {self.id}",
                code="unknown_task",
                field="task_name",
                value=job.task_name,
            )
            self._dead(att, Reason.UNKNOWN_TASK, error_info(exc))
            self._free(att)
            return
        if task.is_async or job.options or job.execution_id is not None:
            self._tg.start_soon(self._run, att)
        elif self._isolation(task) == "process":
            self._start_process(att, task)
        else:
            self._start_thread(att, task, None)

    # ------------------------------------------------------------------ burst

    async def _burst_done(self) -> bool:
        await self._flush_all()
        try:
            pending = await self._count_pending(BURST_HORIZON_MS)
        except StorageError as exc:
            if not self._outage.failed("count_pending", exc):
                log.warning("count_pending failed (%s)", exc)
            return False
        if pending == 0 and not self._table.running:
            return True
        await self._say_waiting(pending)
        return False

    async def _count_pending(self, horizon_ms: int) -> int:
        n: int = await to_thread.run_sync(
            self.storage.count_pending, self._queues, horizon_ms, limiter=self._io
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

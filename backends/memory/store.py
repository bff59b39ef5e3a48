"""The store of ``memory://``: the one lock, the clock, every job and dead-letter entry
and the indexes that keep reads and claims from scanning.

Every part of :class:`~backends.memory.MemoryStorage` holds this store and runs each
operation under :attr:`MemoryStore.cond`, so every operation is atomic. The methods
here are the moves that keep the dicts and indexes consistent
(:meth:`MemoryStore.enter` is the one place a job changes state); they expect the lock
held by the caller.

No operation a worker calls scans every stored job. Each queue keeps a heap of ready
jobs keyed by ``(-priority, order_at, seq)`` (``order_at``: its place in line, the ready
time except for a reaped job, which keeps its place) and a heap of delayed jobs keyed by
``ready_at``; delayed jobs move to the ready heap when their time comes, and a job whose
concurrency key is full is parked on that key until a slot frees. Heap entries are
invalidated lazily: each carries the job's generation number, which changes whenever the
job changes state. Stats, ``count_pending``, ``prune`` and dead-letter pages read
per-queue counters, a heap of finish times and sorted indexes.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterable

from backends.memory.records import DeadEntry, DeadKey, Job, ReadyEntry, TimedEntry
from backends.memory.roundrobin import RoundRobinIndex
from queue_core.records.jobs import ErrorInfo, JobState, LeaseRef, NewJob, Reason
from queue_core.rules.leases import queued_expiry, schedule_to_start_expired

__all__ = ["MemoryStore", "system_clock_ms"]

_ACTIVE = (JobState.QUEUED, JobState.RUNNING)


def system_clock_ms() -> int:
    """Epoch milliseconds by the system clock (the default clock)."""
    return time.time_ns() // 1_000_000


def _decrement(counter: dict[str, int], key: str) -> None:
    if counter[key] <= 1:
        del counter[key]
    else:
        counter[key] -= 1


class MemoryStore:
    """The jobs, dead-letter entries and indexes of one memory storage, and its lock.

    Args:
        clock: epoch-milliseconds clock used when an operation gets ``now=None``.
    """

    def __init__(self, clock: Callable[[], int] = system_clock_ms) -> None:
        self.clock = clock
        self.cond = threading.Condition(threading.Lock())
        """The one lock; notified whenever a job may have become ready."""
        self.closed = False
        self.seq = itertools.count(1)
        self.jobs: dict[str, Job] = {}
        """Every stored job, in enqueue order."""
        self.ready: dict[str, list[ReadyEntry]] = {}
        self.delayed: dict[str, list[TimedEntry]] = {}
        self.expiries: list[TimedEntry] = []
        """``(queued_expiry, gen, job_id)`` of queued jobs with a schedule-to-start bound."""
        self.running: dict[str, Job] = {}
        self.queued: dict[str, set[str]] = {}
        """Ids of the queued jobs of each queue."""
        self.counts: dict[str, dict[JobState, int]] = {}
        """Jobs per state of each queue (stats without a scan)."""
        self.finished: list[TimedEntry] = []
        """``(finished_at, seq, job_id)`` of finished jobs, for prune."""
        self.running_by_key: dict[str, int] = {}
        self.active_by_key: dict[str, int] = {}
        self.parked: dict[str, list[tuple[ReadyEntry, str]]] = {}
        """Ready entries set aside because their key's slots were full, per key."""
        self.dead: dict[str, DeadEntry] = {}
        self.dead_order: list[DeadKey] = []
        """Sorted keys of every dead-letter entry (newest last)."""
        self.dead_by_task: dict[str, list[DeadKey]] = {}
        self.flow_deadlines: list[TimedEntry] = []
        """``(deadline_at, seq, execution_id)`` of started executions with a deadline:
        written by the flows part, read by the reaper."""
        self.flows_finished: list[TimedEntry] = []
        """``(finished_at, seq, execution_id)`` of finished executions, for prune."""
        self.flow_events: list[TimedEntry] = []
        """``(sent_at, seq, name)`` of stored workflow events, for prune."""
        self.round_robin = RoundRobinIndex()
        """The key heaps and turns of ``round_robin`` groups (:meth:`push_ready` fills it)."""
        self.paused_queues: set[str] = set()
        """Paused queues: their heaps are not read by claims (kept by the pauses part)."""

    def now(self, now: int | None) -> int:
        """``now``, or the clock's reading when it is ``None``."""
        return self.clock() if now is None else now

    def close(self) -> None:
        """Wake every waiter; later waits return at once."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    # ------------------------------------------------------------------ state moves

    def add(self, spec: NewJob, t: int) -> Job:
        """Store one new job, ``queued`` or (its ``skip`` key full) ``skipped``."""
        ready_at = (spec.run_at if spec.run_at is not None else t) + spec.delay_ms
        job = Job(
            spec=spec,
            seq=next(self.seq),
            state=JobState.QUEUED,
            enqueued_at=t,
            ready_at=ready_at,
            lost_delay_ms=spec.lost_delay_ms,
        )
        key, cap = spec.concurrency_key, spec.concurrency_limit
        if (
            spec.concurrency_skip
            and key is not None
            and cap is not None
            and self.active_by_key.get(key, 0) >= cap
        ):
            self.end(job, JobState.SKIPPED, Reason.CONCURRENCY_LIMIT.value, t, new=True)
        else:
            self.enter(job, JobState.QUEUED, new=True)
        return job

    def enter(
        self, job: Job, state: JobState, *, new: bool = False, place_at: int | None = None
    ) -> None:
        """Move ``job`` to ``state`` (``new``: store it first), keeping every counter and
        index right. Callers that end a job go through :meth:`end`. A move to ``queued``
        sets the job's place in line to ``place_at`` (a reap's), else to its ready time."""
        key = job.spec.concurrency_key
        queue = job.spec.queue
        counts = self.counts.setdefault(queue, {})
        if new:
            self.jobs[job.id] = job
        else:
            self._leave(job, state, counts)
        job.gen += 1
        job.state = state
        if state is JobState.QUEUED:
            job.place_at = place_at
        counts[state] = counts.get(state, 0) + 1
        if state in _ACTIVE and key is not None:
            self.active_by_key[key] = self.active_by_key.get(key, 0) + 1
        if state is JobState.RUNNING:
            self.running[job.id] = job
            if key is not None:
                self.running_by_key[key] = self.running_by_key.get(key, 0) + 1
        else:
            job.lease_token = None
            job.deadline = None
            job.heartbeat_expires_at = None
            if state is JobState.QUEUED:
                self.queued.setdefault(queue, set()).add(job.id)
                self._index_queued(job)

    def _leave(self, job: Job, state: JobState, counts: dict[JobState, int]) -> None:
        """Take ``job`` out of the counters and indexes of its current state (it moves to
        ``state``)."""
        key = job.spec.concurrency_key
        old = job.state
        counts[old] -= 1
        if old is JobState.QUEUED:
            self.queued[job.spec.queue].discard(job.id)
        elif old is JobState.RUNNING:
            self.running.pop(job.id, None)
        if old in _ACTIVE and key is not None:
            _decrement(self.active_by_key, key)
            if old is JobState.RUNNING:
                _decrement(self.running_by_key, key)
            if state is not JobState.RUNNING:
                self.unpark(key)

    def end(
        self, job: Job, state: JobState, reason: str | None, now: int, *, new: bool = False
    ) -> None:
        """``job`` reaches the final ``state`` at ``now``."""
        self.enter(job, state, new=new)
        job.reason = reason
        job.finished_at = now
        heapq.heappush(self.finished, (now, job.seq, job.id))

    def dead_letter(self, job: Job, reason: str, error: ErrorInfo | None, now: int) -> None:
        """``job`` ends ``dead`` with a dead-letter entry."""
        dead_id = uuid.uuid4().hex
        spec = job.spec
        entry = DeadEntry(
            id=dead_id,
            seq=next(self.seq),
            spec=spec,
            error=error,
            reason=reason,
            attempts=[a.record() for a in job.attempts],
            dead_at=now,
        )
        self.dead[dead_id] = entry
        bisect.insort(self.dead_order, entry.key)
        bisect.insort(self.dead_by_task.setdefault(spec.task_name, []), entry.key)
        job.dead_id = dead_id
        self.end(job, JobState.DEAD, reason, now)

    def drop_dead(self, entry: DeadEntry) -> None:
        """Forget one dead-letter entry (it was retried)."""
        del self.dead[entry.id]
        task_keys = self.dead_by_task[entry.spec.task_name]
        for keys in (self.dead_order, task_keys):
            del keys[bisect.bisect_left(keys, entry.key)]
        if not task_keys:
            del self.dead_by_task[entry.spec.task_name]

    def reschedule(self, job: Job, ready_at: int) -> None:
        """A queued job becomes ready at ``ready_at`` instead (a workflow's wake-up or
        suspension); earlier heap entries go stale."""
        job.gen += 1
        job.ready_at = ready_at
        job.place_at = None
        self._index_queued(job)
        self.cond.notify_all()

    def _index_queued(self, job: Job) -> None:
        q = job.spec.queue
        heapq.heappush(self.delayed.setdefault(q, []), (job.ready_at, job.gen, job.id))
        self.ready.setdefault(q, [])
        expiry = queued_expiry(job.ready_at, job.spec.schedule_to_start_ms)
        if expiry is not None:
            heapq.heappush(self.expiries, (expiry, job.gen, job.id))

    # ------------------------------------------------------------------ reads

    def valid_queued(self, job_id: str, gen: int) -> Job | None:
        """The job of a heap entry, if it is still queued at that generation."""
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.QUEUED or job.gen != gen:
            return None
        return job

    def valid_entry(self, entry: ReadyEntry) -> Job | None:
        """:meth:`valid_queued` of a ready entry."""
        return self.valid_queued(entry[4], entry[3])

    def current(self, ref: LeaseRef) -> Job | None:
        """The job of ``ref`` if that attempt is still the current one (fencing)."""
        job = self.jobs.get(ref.job_id)
        if (
            job is None
            or job.state is not JobState.RUNNING
            or job.attempt != ref.attempt
            or job.lease_token != ref.lease_token
        ):
            return None
        return job

    def due_ready(self, queue: str, now: int) -> list[ReadyEntry]:
        """The ready heap of ``queue``, after moving in its delayed jobs due by ``now``."""
        ready = self.ready.setdefault(queue, [])
        delayed = self.delayed.get(queue)
        while delayed and delayed[0][0] <= now:
            _, gen, job_id = heapq.heappop(delayed)
            job = self.valid_queued(job_id, gen)
            if job is not None:
                entry = (-job.spec.priority, job.order_at, job.seq, gen, job_id)
                self.push_ready(job, queue, entry)
        return ready

    def push_ready(self, job: Job, queue: str, entry: ReadyEntry) -> None:
        """Put ``job``'s ``entry`` in ``queue``'s ready heap (and a ``round_robin`` job's in
        its key's heap)."""
        heapq.heappush(self.ready.setdefault(queue, []), entry)
        if job.spec.concurrency_behavior == "round_robin":
            self.round_robin.ready(job, entry, queue)

    def expired(self, job: Job, now: int) -> bool:
        """A queued job whose schedule-to-start bound has passed."""
        return schedule_to_start_expired(now, job.ready_at, job.spec.schedule_to_start_ms)

    def slot_full(self, job: Job) -> bool:
        """A ``queue``-behaviour job whose key already runs ``concurrency_limit`` jobs."""
        key, cap = job.spec.concurrency_key, job.spec.concurrency_limit
        return (
            key is not None
            and cap is not None
            and not job.spec.concurrency_skip
            and self.running_by_key.get(key, 0) >= cap
        )

    def unpark(self, key: str) -> None:
        """Give the best job parked on ``key`` back to its ready heap.

        Called whenever a job with ``key`` leaves the active set other than by being
        claimed (a slot freed, or a candidate left the queue), so that there are never
        free slots while every waiting candidate is parked.
        """
        parked = self.parked.get(key)
        while parked:
            entry, queue = heapq.heappop(parked)
            job = self.valid_queued(entry[4], entry[3])
            if job is not None:
                self.push_ready(job, queue, entry)
                break
        if not parked:
            self.parked.pop(key, None)

    def next_due(self, queues: Iterable[str], t: int) -> int | None:
        """The earliest time a job of ``queues`` is (or becomes) claimable, if any."""
        due: int | None = None
        for q in queues:
            if q in self.paused_queues:
                continue
            ready = self.due_ready(q, t)
            ready[:] = [e for e in ready if self.valid_queued(e[4], e[3]) is not None]
            heapq.heapify(ready)
            for entry in ready:
                job = self.jobs[entry[4]]
                if self.expired(job, t) or self.slot_full(job):
                    continue
                if job.ready_at <= t:
                    return t
                due = job.ready_at if due is None else min(due, job.ready_at)
            delayed = self.delayed.get(q)
            while delayed and self.valid_queued(delayed[0][2], delayed[0][1]) is None:
                heapq.heappop(delayed)
            if delayed and (due is None or delayed[0][0] < due):
                due = delayed[0][0]
        return due

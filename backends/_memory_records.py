"""The records and indexes of ``memory://`` (:mod:`backends.memory`).

:class:`MemoryIndex` holds every stored job, dead-letter entry and index, and the moves
that keep them consistent (:meth:`MemoryIndex._enter` is the one place a job changes
state). :class:`~backends.memory.MemoryStorage` builds its operations on it; every
method here runs with the storage's lock held by the caller.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from queue_core.model import (
    AttemptRecord,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    LeaseRef,
    NewJob,
    Outcome,
    dt_from_ms,
)
from queue_core.policy.leases import schedule_to_start_expired

__all__ = ["MemoryIndex"]

_ACTIVE = (JobState.QUEUED, JobState.RUNNING)


def _decrement(counter: dict[str, int], key: str) -> None:
    if counter[key] <= 1:
        del counter[key]
    else:
        counter[key] -= 1


def _system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _Attempt:
    number: int
    worker_id: str
    started_at: int
    outcome: Outcome | None = None
    reason: str | None = None
    error: ErrorInfo | None = None
    finished_at: int | None = None
    mode: str | None = None

    def record(self) -> AttemptRecord:
        err = self.error
        return AttemptRecord(
            number=self.number,
            outcome=self.outcome,
            reason=self.reason,
            error_class=err.error_class if err else None,
            error_type=err.error_type if err else None,
            message=err.message if err else None,
            traceback=err.traceback if err else None,
            worker_id=self.worker_id,
            started_at=dt_from_ms(self.started_at),
            finished_at=dt_from_ms(self.finished_at),
            mode=self.mode,
        )


@dataclass(slots=True)
class _Job:
    spec: NewJob
    seq: int
    state: JobState
    enqueued_at: int
    ready_at: int
    reason: str | None = None
    lost_delay_ms: int = 0
    gen: int = 0
    attempts: list[_Attempt] = field(default_factory=list)
    result: bytes | None = None
    error: ErrorInfo | None = None
    finished_at: int | None = None
    lease_token: str | None = None
    lease_expires_at: int = 0
    deadline: int | None = None
    heartbeat_expires_at: int | None = None
    cancel_requested: bool = False
    dead_id: str | None = None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def attempt(self) -> int:
        return len(self.attempts)

    def record(self) -> JobRecord:
        s = self.spec
        return JobRecord(
            id=s.id,
            task_name=s.task_name,
            queue=s.queue,
            state=self.state,
            reason=self.reason,
            payload=s.payload,
            result=self.result,
            error=self.error,
            attempts=self.attempt,
            max_attempts=s.max_attempts,
            priority=s.priority,
            enqueued_at=self.enqueued_at,
            run_at=self.ready_at,
            started_at=self.attempts[-1].started_at if self.attempts else None,
            finished_at=self.finished_at,
            options=s.options,
            replay_of=s.replay_of,
            dead_id=self.dead_id,
            cancel_requested=self.cancel_requested,
            execution_id=s.execution_id,
            step_id=s.step_id,
        )


@dataclass(slots=True)
class _DeadEntry:
    id: str
    seq: int
    spec: NewJob
    """The job's spec as it was enqueued (attempt-1 ``lost_delay_ms``): what
    :func:`~queue_core.policy.outcomes.replay_job` replays."""
    error: ErrorInfo | None
    reason: str
    attempts: list[AttemptRecord]
    dead_at: int

    @property
    def key(self) -> _DeadKey:
        return (self.dead_at, self.seq, self.id)

    def public(self) -> DeadJob:
        s = self.spec
        return DeadJob.build(
            id=self.id,
            job_id=s.id,
            task_name=s.task_name,
            queue=s.queue,
            payload=s.payload,
            error=self.error.message if self.error else None,
            error_class=self.error.error_class if self.error else None,
            reason=self.reason,
            attempts=self.attempts,
            dead_at_ms=self.dead_at,
            replay_of=s.replay_of,
        )


_ReadyEntry = tuple[int, int, int, int, str]  # (-priority, ready_at, seq, gen, job_id)
_TimedEntry = tuple[int, int, str]  # (time, gen or seq, job_id)
_DeadKey = tuple[int, int, str]  # (dead_at, seq, dead_id)


class MemoryIndex:
    """The jobs, dead-letter entries and indexes of a memory storage (caller holds the lock)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock: Callable[[], int] = clock
        self._cond = threading.Condition(threading.Lock())
        self._seq = itertools.count(1)
        self._jobs: dict[str, _Job] = {}
        self._ready: dict[str, list[_ReadyEntry]] = {}
        self._delayed: dict[str, list[_TimedEntry]] = {}
        self._sts: list[_TimedEntry] = []
        self._running: dict[str, _Job] = {}
        self._queued: dict[str, set[str]] = {}
        """Ids of the queued jobs of each queue."""
        self._counts: dict[str, dict[JobState, int]] = {}
        """Jobs per state of each queue (stats without a scan)."""
        self._finished: list[_TimedEntry] = []
        """``(finished_at, seq, job_id)`` of finished jobs, for prune."""
        self._running_by_key: dict[str, int] = {}
        self._active_by_key: dict[str, int] = {}
        self._parked: dict[str, list[tuple[_ReadyEntry, str]]] = {}
        """Ready entries set aside because their key's slots were full, per key."""
        self._dead: dict[str, _DeadEntry] = {}
        self._dead_order: list[_DeadKey] = []
        """Sorted ``(dead_at, seq, dead_id)`` of every entry (newest last)."""
        self._dead_by_task: dict[str, list[_DeadKey]] = {}

    def _now(self, now: int | None) -> int:
        return self._clock() if now is None else now

    def _key(self, job: _Job) -> str | None:
        return job.spec.concurrency_key

    def _enter(self, job: _Job, state: JobState, *, new: bool = False) -> None:
        """Move ``job`` to ``state`` (``new``: store it first), keeping every counter and
        index right. Callers that end a job go through :meth:`_end`."""
        key = self._key(job)
        queue = job.spec.queue
        counts = self._counts.setdefault(queue, {})
        if new:
            self._jobs[job.id] = job
        else:
            old = job.state
            counts[old] -= 1
            if old is JobState.QUEUED:
                self._queued[queue].discard(job.id)
            elif old is JobState.RUNNING:
                self._running.pop(job.id, None)
            if old in _ACTIVE and key is not None:
                _decrement(self._active_by_key, key)
                if old is JobState.RUNNING:
                    _decrement(self._running_by_key, key)
                if state is not JobState.RUNNING:
                    self._unpark(key)
        job.gen += 1
        job.state = state
        counts[state] = counts.get(state, 0) + 1
        if state in _ACTIVE and key is not None:
            self._active_by_key[key] = self._active_by_key.get(key, 0) + 1
        if state is JobState.RUNNING:
            self._running[job.id] = job
            if key is not None:
                self._running_by_key[key] = self._running_by_key.get(key, 0) + 1
        else:
            job.lease_token = None
            job.deadline = None
            job.heartbeat_expires_at = None
            if state is JobState.QUEUED:
                self._queued.setdefault(queue, set()).add(job.id)
                self._index_queued(job)

    def _index_queued(self, job: _Job) -> None:
        q = job.spec.queue
        heapq.heappush(self._delayed.setdefault(q, []), (job.ready_at, job.gen, job.id))
        self._ready.setdefault(q, [])
        sts = job.spec.schedule_to_start_ms
        if sts is not None:
            heapq.heappush(self._sts, (job.ready_at + sts, job.gen, job.id))

    def _valid_queued(self, job_id: str, gen: int) -> _Job | None:
        job = self._jobs.get(job_id)
        if job is None or job.state is not JobState.QUEUED or job.gen != gen:
            return None
        return job

    def _promote(self, queue: str, now: int) -> list[_ReadyEntry]:
        """Move delayed jobs of ``queue`` that are due by ``now`` into its ready heap."""
        ready = self._ready.setdefault(queue, [])
        delayed = self._delayed.get(queue)
        while delayed and delayed[0][0] <= now:
            _, gen, job_id = heapq.heappop(delayed)
            job = self._valid_queued(job_id, gen)
            if job is not None:
                heapq.heappush(ready, (-job.spec.priority, job.ready_at, job.seq, gen, job_id))
        return ready

    def _sts_expired(self, job: _Job, now: int) -> bool:
        return schedule_to_start_expired(now, job.ready_at, job.spec.schedule_to_start_ms)

    def _slot_full(self, job: _Job) -> bool:
        """A ``queue``-behaviour job whose key already runs ``concurrency_limit`` jobs."""
        key, cap = job.spec.concurrency_key, job.spec.concurrency_limit
        return (
            key is not None
            and cap is not None
            and not job.spec.concurrency_skip
            and self._running_by_key.get(key, 0) >= cap
        )

    def _blocked(self, job: _Job, now: int) -> bool:
        """Queued but not claimable: schedule-to-start expired, or its slot is full."""
        return self._sts_expired(job, now) or self._slot_full(job)

    def _unpark(self, key: str) -> None:
        """Give the best job parked on ``key`` back to its ready heap.

        Called whenever a job with ``key`` leaves the active set other than by being
        claimed (a slot freed, or a candidate left the queue), so that there are never
        free slots while every waiting candidate is parked.
        """
        parked = self._parked.get(key)
        while parked:
            entry, queue = heapq.heappop(parked)
            if self._valid_queued(entry[4], entry[3]) is not None:
                heapq.heappush(self._ready[queue], entry)
                break
        if not parked:
            self._parked.pop(key, None)

    def _current(self, ref: LeaseRef) -> _Job | None:
        job = self._jobs.get(ref.job_id)
        if (
            job is None
            or job.state is not JobState.RUNNING
            or job.attempt != ref.attempt
            or job.lease_token != ref.lease_token
        ):
            return None
        return job

    def _dead_letter(self, job: _Job, reason: str, error: ErrorInfo | None, now: int) -> None:
        dead_id = uuid.uuid4().hex
        spec = job.spec
        entry = _DeadEntry(
            id=dead_id,
            seq=next(self._seq),
            spec=spec,
            error=error,
            reason=reason,
            attempts=[a.record() for a in job.attempts],
            dead_at=now,
        )
        self._dead[dead_id] = entry
        bisect.insort(self._dead_order, entry.key)
        bisect.insort(self._dead_by_task.setdefault(spec.task_name, []), entry.key)
        job.dead_id = dead_id
        self._end(job, JobState.DEAD, reason, now)

    def _drop_dead(self, entry: _DeadEntry) -> None:
        del self._dead[entry.id]
        task_keys = self._dead_by_task[entry.spec.task_name]
        for keys in (self._dead_order, task_keys):
            del keys[bisect.bisect_left(keys, entry.key)]
        if not task_keys:
            del self._dead_by_task[entry.spec.task_name]

    def _end(
        self, job: _Job, state: JobState, reason: str | None, now: int, *, new: bool = False
    ) -> None:
        self._enter(job, state, new=new)
        job.reason = reason
        job.finished_at = now
        heapq.heappush(self._finished, (now, job.seq, job.id))

    def _next_due(self, queues: Iterable[str], t: int) -> int | None:
        """The earliest time a job of ``queues`` is (or becomes) claimable, if any."""
        due: int | None = None
        for q in queues:
            ready = self._promote(q, t)
            ready[:] = [e for e in ready if self._valid_queued(e[4], e[3]) is not None]
            heapq.heapify(ready)
            for entry in ready:
                job = self._jobs[entry[4]]
                if self._blocked(job, t):
                    continue
                if job.ready_at <= t:
                    return t
                due = job.ready_at if due is None else min(due, job.ready_at)
            delayed = self._delayed.get(q)
            while delayed and self._valid_queued(delayed[0][2], delayed[0][1]) is None:
                heapq.heappop(delayed)
            if delayed and (due is None or delayed[0][0] < due):
                due = delayed[0][0]
        return due

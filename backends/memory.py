"""``memory://``: the in-process reference implementation of :class:`~queue_core.Storage`.

It is the executable specification of the storage protocol: it passes the published
contract suite (:mod:`queue_core.testing`) like every other backend, and worker and
facade unit tests run on it. Everything lives in plain dicts and heaps guarded by one
lock, so every operation is atomic and concurrent callers behave as if serialised.

No operation a worker calls scans every stored job. Claiming is ``O(k log n)`` for
``k`` claimed jobs: each queue keeps a heap of ready jobs keyed by
``(-priority, ready_at, seq)`` and a heap of delayed jobs keyed by ``ready_at``;
delayed jobs move to the ready heap when their time comes, and a job whose concurrency
key is full is parked on that key until a slot frees. Heap entries are invalidated
lazily: each carries the job's generation number, which changes whenever the job
changes state. Stats, ``count_pending``, ``prune`` and
dead-letter pages read per-queue counters, a heap of finish times and sorted indexes.

Example:
    >>> storage = MemoryStorage.from_url("memory://?retention=1h")
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import uuid
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs, urlsplit

from typing_extensions import Self

from backends._memory_flows import FlowBook, MemoryFlows
from backends._memory_limits import MemoryLimits
from backends._memory_records import (
    MemoryIndex,
    _Attempt,
    _Job,
    _ReadyEntry,
    _system_clock_ms,
)
from backends._memory_schedules import MemorySchedules
from backends._memory_throughput import MemoryThroughput
from backends._memory_workers import MemoryWorkers
from queue_core.errors import ConfigError, LeaseLost, NotFound
from queue_core.model import (
    AttemptEnd,
    AttemptRecord,
    ClaimedJob,
    DeadJob,
    JobRecord,
    JobState,
    LeaseRef,
    NewJob,
    QueueStats,
    ReapedJob,
    Reason,
    RenewResult,
)
from queue_core.policy.outcomes import (
    DEFAULT_RETENTION_MS,
    ReapVerdict,
    end_state,
    parse_retention,
    reap_verdict,
    replay_job,
)
from queue_core.storage import Storage

__all__ = ["MemoryStorage"]


class MemoryStorage(
    MemoryLimits,
    MemorySchedules,
    MemoryWorkers,
    MemoryThroughput,
    MemoryFlows,
    MemoryIndex,
    Storage,
):
    """Thread-safe in-process storage; the reference backend (``memory://``).

    Args:
        retention_ms: how long finished jobs are kept before :meth:`prune` deletes them
            (default 7 days); ``0`` keeps none: the next prune deletes every finished job.
        clock: epoch-milliseconds clock used when an operation gets ``now=None``
            (default: the system clock).

    Supports :class:`~queue_core.storage.SupportsWakeup` (a condition variable notified
    whenever a job may have become ready) and
    :class:`~queue_core.storage.SupportsJobScan` and
    :class:`~queue_core.storage.SupportsFlows` (the reference: ``backends/_memory_flows.py``).
    """

    def __init__(
        self,
        *,
        retention_ms: int = DEFAULT_RETENTION_MS,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if retention_ms < 0:
            raise ConfigError(
                f"retention_ms must be >= 0, got {retention_ms!r}",
                code="invalid_option",
                field="retention_ms",
                value=retention_ms,
            )
        self.retention_ms = retention_ms
        MemoryIndex.__init__(self, clock or _system_clock_ms)
        MemoryLimits.__init__(self)
        self._closed = False
        self._flows = FlowBook(self)
        self._workers = {}

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from ``memory://`` (optionally ``memory://?retention=<duration>``).

        ``retention`` is read by :func:`~queue_core.policy.outcomes.parse_retention`:
        seconds, a duration (``12h``), days (``7d``), or ``0`` to keep no finished job.
        """
        parts = urlsplit(url)
        if parts.scheme.lower() != "memory":
            raise ConfigError(
                f"not a memory:// URL: {parts.scheme!r}",
                code="invalid_url",
                field="url",
                value=parts.scheme,
            )
        query = parse_qs(parts.query)
        unknown = sorted(set(query) - {"retention"})
        if unknown:
            raise ConfigError(
                f"unknown memory:// option(s) {', '.join(unknown)}; supported: retention",
                code="invalid_option",
                field="url",
                value=unknown[0],
            )
        if "retention" in query:
            return cls(retention_ms=parse_retention(query["retention"][-1]))
        return cls()

    def __repr__(self) -> str:
        return f"MemoryStorage(jobs={len(self._jobs)}, dead={len(self._dead)})"

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.Storage.enqueue`. A batch is all-or-nothing here."""
        return [e.state for e in self.enqueue_unique(jobs, now=now)]

    def _add_job(self, spec: NewJob, t: int) -> _Job:
        """Store one new job, ``queued`` or (a full ``skip`` key) ``skipped``."""
        ready_at = (spec.run_at if spec.run_at is not None else t) + spec.delay_ms
        job = _Job(
            spec=spec,
            seq=next(self._seq),
            state=JobState.QUEUED,
            enqueued_at=t,
            ready_at=ready_at,
            lost_delay_ms=spec.lost_delay_ms,
        )
        key = spec.concurrency_key
        if (
            spec.concurrency_skip
            and key is not None
            and spec.concurrency_limit is not None
            and self._active_by_key.get(key, 0) >= spec.concurrency_limit
        ):
            self._end(job, JobState.SKIPPED, Reason.CONCURRENCY_LIMIT.value, t, new=True)
        else:
            self._enter(job, JobState.QUEUED, new=True)
        return job

    # ------------------------------------------------------------------ claim / lease

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.Storage.claim`."""
        with self._cond:
            t = self._now(now)
            heaps = {q: self._promote(q, t) for q in dict.fromkeys(queues)}
            aside: list[tuple[str, _ReadyEntry]] = []
            claimed: list[ClaimedJob] = []
            while len(claimed) < limit:
                best: str | None = None
                for q, h in heaps.items():
                    if h and (best is None or h[0] < heaps[best][0]):
                        best = q
                if best is None:
                    break
                entry = heapq.heappop(heaps[best])
                job = self._valid_queued(entry[4], entry[3])
                if job is None:
                    continue
                if job.ready_at > t:  # promoted by a later `now` than this one
                    heapq.heappush(self._delayed[best], (job.ready_at, job.gen, job.id))
                    continue
                if self._sts_expired(job, t):
                    aside.append((best, entry))  # left queued for reap to dead-letter
                    continue
                if self._slot_full(job):
                    key = job.spec.concurrency_key
                    assert key is not None
                    heapq.heappush(self._parked.setdefault(key, []), (entry, best))
                    continue
                if job.spec.rate_key is not None and not self._rate_take(job.spec, t):
                    aside.append((best, entry))  # over its rate: stays queued
                    continue
                claimed.append(self._start(job, worker_id, lease_ms, t))
            for q, entry in aside:
                heapq.heappush(heaps[q], entry)
            return claimed

    def _start(self, job: _Job, worker_id: str, lease_ms: int, t: int) -> ClaimedJob:
        self._enter(job, JobState.RUNNING)
        job.reason = None
        job.attempts.append(_Attempt(number=job.attempt + 1, worker_id=worker_id, started_at=t))
        job.lease_token = uuid.uuid4().hex
        job.lease_expires_at = t + lease_ms
        s = job.spec
        job.deadline = t + s.timeout_ms if s.timeout_ms is not None else None
        job.heartbeat_expires_at = t + s.heartbeat_ms if s.heartbeat_ms is not None else None
        self._flows.job_started(job)
        flow_end = s.flow_deadline_at
        return ClaimedJob(
            id=s.id,
            task_name=s.task_name,
            queue=s.queue,
            payload=s.payload,
            attempt=job.attempt,
            lease_token=job.lease_token,
            lease_expires_at=job.lease_expires_at,
            deadline=job.deadline if flow_end is None else min(job.deadline or flow_end, flow_end),
            max_attempts=s.max_attempts,
            priority=s.priority,
            timeout_ms=s.timeout_ms,
            heartbeat_ms=s.heartbeat_ms,
            options=s.options,
            enqueued_at=job.enqueued_at,
            replay_of=s.replay_of,
            started_at=t,
            execution_id=s.execution_id,
            step_id=s.step_id,
            flow_deadline_at=flow_end,
            run_at=job.ready_at,
        )

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.Storage.renew`."""
        with self._cond:
            t = self._now(now)
            result = RenewResult()
            for ref in refs:
                job = self._current(ref)
                if job is None:
                    result.lost.append(ref)
                    continue
                job.lease_expires_at = t + lease_ms
                if job.cancel_requested:
                    result.cancel_requested.append(ref)
            return result

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.Storage.heartbeat`."""
        with self._cond:
            t = self._now(now)
            job = self._current(ref)
            if job is None:
                raise LeaseLost(f"attempt {ref.attempt} of job {ref.job_id} is not current")
            if job.spec.heartbeat_ms is not None:
                job.heartbeat_expires_at = t + job.spec.heartbeat_ms
            return job.cancel_requested

    # ------------------------------------------------------------------ attempt end

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.Storage.finish`."""
        with self._cond:
            t = self._now(now)
            took: list[bool] = []
            for end in ends:
                job = self._current(end.ref)
                if job is None:
                    took.append(False)
                    continue
                attempt = job.attempts[-1]
                attempt.outcome = end.outcome
                attempt.reason = end.reason
                attempt.error = end.error
                attempt.mode = end.mode
                attempt.finished_at = t
                if end.error is not None:
                    job.error = end.error
                d = end.decision
                state, reason = end_state(d, end.reason)
                if state is JobState.SUCCEEDED:
                    job.result = end.result
                    self._end(job, state, reason, t)
                elif state is JobState.QUEUED:
                    if d.lost_delay_ms is not None:
                        job.lost_delay_ms = d.lost_delay_ms
                    job.ready_at = t + d.delay_ms
                    job.reason = None
                    self._enter(job, JobState.QUEUED)
                elif state is JobState.DEAD:
                    assert reason is not None
                    self._dead_letter(job, reason, end.error, t)
                else:
                    self._end(job, state, reason, t)
                self._flows.job_ended(job, t)
                took.append(True)
            if any(took):
                self._cond.notify_all()
            return took

    # ------------------------------------------------------------------ reaper

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.Storage.reap`."""
        with self._cond:
            t = self._now(now)
            reaped = self._flows.reap_deadlines(t, limit)
            stale: list[tuple[int, int, _Job, ReapVerdict]] = []
            for job in self._running.values():
                verdict = reap_verdict(
                    t,
                    lease_expires_at=job.lease_expires_at,
                    deadline=job.deadline,
                    heartbeat_expires_at=job.heartbeat_expires_at,
                    cancel_requested=job.cancel_requested,
                    attempt=job.attempt,
                    max_attempts=job.spec.max_attempts,
                    lost_delay_ms=job.lost_delay_ms,
                    run_at=job.ready_at,
                    schedule_to_start_ms=job.spec.schedule_to_start_ms,
                )
                if verdict is not None:
                    stale.append((job.lease_expires_at, job.seq, job, verdict))
            stale.sort(key=lambda s: (s[0], s[1]))
            for _, _, job, verdict in stale[: limit - len(reaped)]:
                reaped.append(self._reap_attempt(job, verdict, t))
            while len(reaped) < limit and self._sts and self._sts[0][0] <= t:
                _, gen, job_id = heapq.heappop(self._sts)
                queued = self._valid_queued(job_id, gen)
                if queued is None:
                    continue
                self._dead_letter(queued, Reason.SCHEDULE_TO_START.value, None, t)
                self._flows.job_ended(queued, t)
                reaped.append(
                    ReapedJob(
                        job_id=job_id,
                        attempt=0,
                        outcome=None,
                        reason=Reason.SCHEDULE_TO_START.value,
                        state=JobState.DEAD,
                    )
                )
            if reaped:
                self._cond.notify_all()
            return reaped

    def _reap_attempt(self, job: _Job, verdict: ReapVerdict, t: int) -> ReapedJob:
        attempt = job.attempts[-1]
        attempt.outcome = verdict.outcome
        attempt.reason = verdict.reason.value
        attempt.finished_at = t
        if verdict.state is JobState.QUEUED:
            assert verdict.ready_at is not None
            job.ready_at = verdict.ready_at
            job.reason = None
            self._enter(job, JobState.QUEUED)
        elif verdict.state is JobState.DEAD:
            assert verdict.job_reason is not None
            self._dead_letter(job, verdict.job_reason, None, t)
        else:
            self._end(job, verdict.state, verdict.job_reason, t)
        self._flows.job_ended(job, t)
        return ReapedJob(
            job_id=job.id,
            attempt=attempt.number,
            outcome=verdict.outcome,
            reason=verdict.reason.value,
            state=job.state,
        )

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.Storage.prune`."""
        with self._cond:
            cutoff = self._now(now) - self.retention_ms
            heap, deleted = self._finished, 0
            while heap and heap[0][0] <= cutoff and deleted < limit:
                finished_at, _, job_id = heapq.heappop(heap)
                job = self._jobs.get(job_id)
                if job is None or job.finished_at != finished_at or not job.state.finished:
                    continue  # stale entry: the job is already gone
                del self._jobs[job_id]
                self._counts[job.spec.queue][job.state] -= 1
                self._forget_unique(job.spec)
                deleted += 1
            self._flows.prune(cutoff, limit)
            return deleted

    # ------------------------------------------------------------------ control and reads

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.Storage.cancel`."""
        with self._cond:
            t = self._now(now)
            job = self._jobs.get(job_id)
            if job is None:
                raise NotFound(f"no job with id {job_id!r}")
            if job.state is JobState.QUEUED:
                self._end(job, JobState.CANCELLED, Reason.CANCELLED.value, t)
                self._flows.job_ended(job, t)
                self._cond.notify_all()  # may free a skip-concurrency slot
            elif job.state is JobState.RUNNING:
                job.cancel_requested = True
            return job.state

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.Storage.get_job`."""
        with self._cond:
            job = self._jobs.get(job_id)
            return job.record() if job is not None else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.Storage.list_attempts`."""
        with self._cond:
            job = self._jobs.get(job_id)
            return [a.record() for a in job.attempts] if job is not None else []

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.Storage.count_pending`."""
        with self._cond:
            by = self._now(now) + horizon_ms
            total = 0
            for q in dict.fromkeys(queues):
                total += self._counts.get(q, {}).get(JobState.RUNNING, 0)
                total += sum(1 for i in self._queued.get(q, ()) if self._jobs[i].ready_at <= by)
            return total

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.Storage.stats`."""
        with self._cond:
            t = self._now(now)
            out: list[QueueStats] = []
            for q in sorted(self._counts):
                c = self._counts[q]
                if not any(c.values()):
                    continue
                ready = sum(1 for i in self._queued.get(q, ()) if self._jobs[i].ready_at <= t)
                out.append(
                    QueueStats(
                        queue=q,
                        ready=ready,
                        scheduled=c.get(JobState.QUEUED, 0) - ready,
                        running=c.get(JobState.RUNNING, 0),
                        succeeded=c.get(JobState.SUCCEEDED, 0),
                        dead=c.get(JobState.DEAD, 0),
                        cancelled=c.get(JobState.CANCELLED, 0),
                        skipped=c.get(JobState.SKIPPED, 0),
                        timed_out=c.get(JobState.TIMED_OUT, 0),
                    )
                )
            return out

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.Storage.list_dead`. ``O(limit)`` per page."""
        with self._cond:
            keys = self._dead_order if task_name is None else self._dead_by_task.get(task_name, [])
            end = max(len(keys) - max(offset, 0), 0)
            page = keys[max(end - max(limit, 0), 0) : end]
            return [self._dead[k[2]].public() for k in reversed(page)]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.Storage.get_dead`."""
        with self._cond:
            entry = self._dead.get(dead_id)
            return entry.public() if entry is not None else None

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """See :meth:`queue_core.storage.Storage.retry_dead`."""
        with self._cond:
            t = self._now(now)
            entry = self._dead.get(dead_id)
            if entry is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            new_id = uuid.uuid4().hex
            spec = replay_job(entry.spec, dead_id=dead_id, new_id=new_id, queue=queue, now=t)
            self._drop_dead(entry)
            job = _Job(
                spec=spec,
                seq=next(self._seq),
                state=JobState.QUEUED,
                enqueued_at=t,
                ready_at=t,
                lost_delay_ms=spec.lost_delay_ms,
            )
            self._enter(job, JobState.QUEUED, new=True)
            self._cond.notify_all()
            return new_id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.Storage.purge_dead`."""
        with self._cond:
            keys = self._dead_order if task_name is None else self._dead_by_task.get(task_name, [])
            if before is not None:
                keys = keys[: bisect.bisect_left(keys, (before + 1,))]
            doomed = {k[2] for k in keys}
            if not doomed:
                return 0
            tasks = {self._dead.pop(dead_id).spec.task_name for dead_id in doomed}
            self._dead_order = [k for k in self._dead_order if k[2] not in doomed]
            for task in tasks:
                kept = [k for k in self._dead_by_task[task] if k[2] not in doomed]
                if kept:
                    self._dead_by_task[task] = kept
                else:
                    del self._dead_by_task[task]
            return len(doomed)

    def close(self) -> None:
        """Nothing to release; wakes blocked :meth:`wait_for_jobs` callers. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ optional abilities

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may be ready in ``queues``.

        Returns ``True`` at once when one is ready now, and when woken by an enqueue, a
        retry, a released slot, or the due time of the earliest delayed job.
        """
        with self._cond:
            if self._closed:
                return False
            t = self._clock()
            due = self._next_due(queues, t)
            if due is not None and due <= t:
                return True
            wait = timeout if due is None else min(timeout, (due - t) / 1000.0)
            woken = self._cond.wait(wait)
            return woken or (due is not None and wait < timeout)

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (most recently enqueued) first, optionally filtered."""
        with self._cond:
            matches = (
                j
                for j in reversed(self._jobs.values())
                if (state is None or j.state is state) and (queue is None or j.spec.queue == queue)
            )
            page = itertools.islice(matches, max(offset, 0), max(offset, 0) + max(limit, 0))
            return [j.record() for j in page]

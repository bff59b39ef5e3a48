"""Jobs of ``memory://``: enqueue, cancel, and the reads of one job or a page of jobs.

Claims, attempt ends and the reaper are parts of their own
(:mod:`~backends.memory.claiming`, :mod:`~backends.memory.finishing`,
:mod:`~backends.memory.reaping`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from backends.memory.limits import MemoryLimits
from backends.memory.pauses import MemoryPauses
from backends.memory.store import MemoryStore
from queue_core.records.errors import NotFound
from queue_core.records.jobs import AttemptRecord, JobRecord, JobState, NewJob, Reason
from queue_core.rules.paging import check_page

if TYPE_CHECKING:
    from backends.memory.flows import MemoryFlows

__all__ = ["MemoryJobs"]


class MemoryJobs:
    """``enqueue``, ``cancel``, ``get_job``, ``list_attempts``, ``count_pending`` and
    :class:`~queue_core.storage.abilities.SupportsJobScan`.

    Args:
        store: the store.
        limits: every enqueue goes through its unique-key check.
        pauses: ``count_pending`` leaves paused jobs out.
        flows: the flows part (built on first use), told when a step's job is cancelled.
    """

    def __init__(
        self,
        store: MemoryStore,
        limits: MemoryLimits,
        pauses: MemoryPauses,
        flows: Callable[[], MemoryFlows],
    ) -> None:
        self.store = store
        self.limits = limits
        self.pauses = pauses
        self.flows = flows

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue`; a batch is all-or-nothing."""
        return [e.state for e in self.limits.enqueue_unique(jobs, now=now)]

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.protocol.Storage.cancel`."""
        store = self.store
        with store.cond:
            t = store.now(now)
            job = store.jobs.get(job_id)
            if job is None:
                raise NotFound(f"no job with id {job_id!r}")
            if job.state is JobState.QUEUED:
                store.end(job, JobState.CANCELLED, Reason.CANCELLED.value, t)
                if job.spec.execution_id is not None:
                    self.flows().step_ended(job, t)
                store.cond.notify_all()  # may free a skip-concurrency slot
            elif job.state is JobState.RUNNING:
                job.cancel_requested = True
            return job.state

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_job`."""
        with self.store.cond:
            job = self.store.jobs.get(job_id)
            return job.record() if job is not None else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.protocol.Storage.list_attempts`."""
        with self.store.cond:
            job = self.store.jobs.get(job_id)
            return [a.record() for a in job.attempts] if job is not None else []

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.count_pending`."""
        store = self.store
        with store.cond:
            by = store.now(now) + horizon_ms
            total = 0
            is_paused = self.pauses.is_paused
            for q in dict.fromkeys(queues):
                total += store.counts.get(q, {}).get(JobState.RUNNING, 0)
                if q in store.paused_queues:
                    continue
                due = (store.jobs[i] for i in store.queued.get(q, ()))
                total += sum(1 for j in due if j.ready_at <= by and not is_paused(j))
            return total

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (most recently enqueued) first, optionally filtered."""
        limit, offset = check_page(limit, offset)
        with self.store.cond:
            matches = (
                j
                for j in reversed(self.store.jobs.values())
                if (state is None or j.state is state) and (queue is None or j.spec.queue == queue)
            )
            page = itertools.islice(matches, max(offset, 0), max(offset, 0) + max(limit, 0))
            return [j.record() for j in page]

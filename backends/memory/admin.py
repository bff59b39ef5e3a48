"""Dead letters, stats and prune of ``memory://``.

Dead-letter pages are ``O(limit)`` slices of sorted indexes; stats read per-queue
counters; prune pops a heap of finish times (and the flows part's finished executions,
which finish no earlier than their step jobs).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from backends.memory.limits import MemoryLimits
from backends.memory.progress import MemoryProgress
from backends.memory.records import DeadEntry, Job
from backends.memory.store import MemoryStore
from queue_core.records.errors import ConfigError, NotFound
from queue_core.records.jobs import DeadJob, JobState, QueueStats
from queue_core.rules.outcomes import replay_job
from queue_core.rules.paging import check_page
from queue_core.storage.job_ids import new_job_id

if TYPE_CHECKING:
    from backends.memory.flows import MemoryFlows
    from backends.memory.workflows import MemoryWorkflows

__all__ = ["MemoryAdmin"]


class MemoryAdmin:
    """``list_dead``, ``get_dead``, ``retry_dead``, ``purge_dead``, ``stats``, ``prune``.

    Args:
        store: the store.
        limits: a pruned job's unique key (and debounce, superseding key) is dropped.
        progress: a pruned job's progress is dropped.
        flows: the flows part (built on first use): finished executions are pruned too.
        retention_ms: how long finished jobs are kept (``>= 0``).
        workflows: the workflows part (built on first use): ``retry_dead`` of a step's
            entry resumes its execution.
    """

    def __init__(
        self,
        store: MemoryStore,
        limits: MemoryLimits,
        progress: MemoryProgress,
        flows: Callable[[], MemoryFlows],
        retention_ms: int,
        workflows: Callable[[], MemoryWorkflows] | None = None,
    ) -> None:
        if retention_ms < 0:
            raise ConfigError(
                f"retention_ms must be >= 0, got {retention_ms!r}",
                code="invalid_option",
                field="retention_ms",
                value=retention_ms,
            )
        self.store = store
        self.limits = limits
        self.progress = progress
        self.flows = flows
        self.workflows = workflows
        self.retention_ms = retention_ms

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.prune`."""
        store = self.store
        with store.cond:
            cutoff = store.now(now) - self.retention_ms
            heap, deleted = store.finished, 0
            while heap and heap[0][0] <= cutoff and deleted < limit:
                finished_at, _, job_id = heapq.heappop(heap)
                job = store.jobs.get(job_id)
                if job is None or job.finished_at != finished_at or not job.state.finished:
                    continue  # stale entry: the job is already gone
                if job.spec.execution_id is not None and self.flows().holds(job):
                    continue  # a workflow's job goes with its execution (below)
                self._delete(job)
                deleted += 1
            if store.flows_finished or store.flow_events:
                for job_id in self.flows().prune(cutoff, limit):
                    job = store.jobs.get(job_id)
                    if job is not None and job.state.finished:
                        self._delete(job)
                        deleted += 1
            self.limits.forget_rates(store.now(now))
            return deleted

    def _delete(self, job: Job) -> None:
        del self.store.jobs[job.id]
        self.store.counts[job.spec.queue][job.state] -= 1
        self.limits.forget_unique(job.spec)
        self.limits.control.forget(job.spec)
        self.progress.forget(job.id)

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.protocol.Storage.stats`."""
        store = self.store
        with store.cond:
            t = store.now(now)
            out: list[QueueStats] = []
            for q in sorted(store.counts):
                c = store.counts[q]
                if not any(c.values()):
                    continue
                ready = sum(1 for i in store.queued.get(q, ()) if store.jobs[i].ready_at <= t)
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

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.protocol.Storage.list_dead`. ``O(limit)`` per page."""
        limit, offset = check_page(limit, offset)
        store = self.store
        with store.cond:
            keys = store.dead_order if task_name is None else store.dead_by_task.get(task_name, [])
            end = max(len(keys) - max(offset, 0), 0)
            page = keys[max(end - max(limit, 0), 0) : end]
            return [store.dead[k[2]].public() for k in reversed(page)]

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_dead`."""
        with self.store.cond:
            entry = self.store.dead.get(dead_id)
            return entry.public() if entry is not None else None

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """See :meth:`queue_core.storage.protocol.Storage.retry_dead`."""
        store = self.store
        with store.cond:
            t = store.now(now)
            entry = store.dead.get(dead_id)
            if entry is None:
                raise NotFound(f"no dead-letter entry with id {dead_id!r}")
            eid = entry.spec.execution_id
            if eid is not None and self.workflows is not None:
                return self._resume_step(entry, eid, t)
            new_id = new_job_id()
            spec = replay_job(entry.spec, dead_id=dead_id, new_id=new_id, queue=queue, now=t)
            store.drop_dead(entry)
            job = Job(
                spec=spec,
                seq=next(store.seq),
                state=JobState.QUEUED,
                enqueued_at=t,
                ready_at=t,
                lost_delay_ms=spec.lost_delay_ms,
            )
            store.enter(job, JobState.QUEUED, new=True)
            store.cond.notify_all()
            return new_id

    def _resume_step(self, entry: DeadEntry, execution_id: str, t: int) -> str:
        """A step job's entry: its execution resumes (``SupportsWorkflows``); the entry goes."""
        assert self.workflows is not None
        if execution_id not in self.flows().executions:
            raise ConfigError(
                f"dead letter {entry.id} is a step of execution {execution_id}, which is gone "
                "(pruned): it cannot be resumed",
                code="invalid_option",
                field="dead_id",
                value=entry.id,
            )
        self.workflows().resume(execution_id, None, t)
        if entry.id in self.store.dead:
            self.store.drop_dead(entry)
        self.store.cond.notify_all()
        return entry.spec.id

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.purge_dead`."""
        store = self.store
        with store.cond:
            keys = store.dead_order if task_name is None else store.dead_by_task.get(task_name, [])
            if before is not None:
                keys = keys[: bisect.bisect_left(keys, (before + 1,))]
            doomed = {k[2] for k in keys}
            if not doomed:
                return 0
            tasks = {store.dead.pop(dead_id).spec.task_name for dead_id in doomed}
            store.dead_order = [k for k in store.dead_order if k[2] not in doomed]
            for task in tasks:
                kept = [k for k in store.dead_by_task[task] if k[2] not in doomed]
                if kept:
                    store.dead_by_task[task] = kept
                else:
                    del store.dead_by_task[task]
            return len(doomed)

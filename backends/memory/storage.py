"""``memory://``: the in-process reference implementation of :class:`~queue_core.Storage`.

It is the executable specification of the storage protocol: it passes the published
contract suite (:mod:`queue_core.testing`) like every other backend, and worker and
facade unit tests run on it. :class:`MemoryStorage` builds a store (plain dicts and heaps
guarded by one lock, :mod:`backends.memory.store`) and one part per capability on it,
and delegates each operation to its part.

Example:
    >>> storage = MemoryStorage.from_url("memory://?retention=1h")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from typing_extensions import Self

from backends.memory.admin import MemoryAdmin
from backends.memory.claiming import MemoryClaiming
from backends.memory.control import MemoryControl
from backends.memory.finishing import MemoryFinishing
from backends.memory.jobs import MemoryJobs
from backends.memory.limits import MemoryLimits
from backends.memory.pauses import MemoryPauses
from backends.memory.progress import MemoryProgress
from backends.memory.reaping import MemoryReaping
from backends.memory.store import MemoryStore, system_clock_ms
from backends.memory.workers import MemoryWorkers
from queue_core.records.control import Pause, PauseKind, Progress, ProgressUpdate
from queue_core.records.errors import ConfigError
from queue_core.records.jobs import (
    AttemptEnd,
    AttemptRecord,
    ClaimedJob,
    DeadJob,
    Enqueued,
    JobRecord,
    JobState,
    LeaseRef,
    NewJob,
    QueueStats,
    ReapedJob,
    RenewResult,
)
from queue_core.records.workers import WorkerInfo
from queue_core.rules.outcomes import DEFAULT_RETENTION_MS, parse_retention
from queue_core.rules.throughput import THROUGHPUT_RESOLUTION_MS
from queue_core.storage.abilities import (
    SupportsCancelPoll,
    SupportsDebounce,
    SupportsFlows,
    SupportsJobScan,
    SupportsPause,
    SupportsProgress,
    SupportsRateLimits,
    SupportsRoundRobin,
    SupportsSchedules,
    SupportsSupersede,
    SupportsThroughput,
    SupportsUniqueJobs,
    SupportsWaitInterrupt,
    SupportsWakeup,
    SupportsWorkerRegistry,
    SupportsWorkflows,
)
from queue_core.storage.lazy import Lazy
from queue_core.storage.protocol import Storage

if TYPE_CHECKING:
    from backends.memory.flows import MemoryFlows
    from backends.memory.schedules import MemorySchedules
    from backends.memory.throughput import MemoryThroughput
    from backends.memory.workflows import MemoryWorkflows
    from queue_core.records.flows import ExecutionState
    from queue_core.rules.throughput import ThroughputCount
    from queue_core.storage.flows import ExecutionRecord, NewExecution, StepInputs, StepRecord
    from queue_core.storage.workflows import WorkflowState

__all__ = ["MemoryStorage"]


def _build_flows(storage: MemoryStorage) -> MemoryFlows:
    from backends.memory.flows import MemoryFlows

    return MemoryFlows(storage.store)


def _build_workflows(storage: MemoryStorage) -> MemoryWorkflows:
    from backends.memory.workflows import MemoryWorkflows

    return MemoryWorkflows(storage.store, storage._get_flows)


def _build_schedules(storage: MemoryStorage) -> MemorySchedules:
    from backends.memory.schedules import MemorySchedules

    return MemorySchedules(storage.store, storage.control)


def _build_throughput(storage: MemoryStorage) -> MemoryThroughput:
    from backends.memory.throughput import MemoryThroughput

    return MemoryThroughput(storage.store)


class MemoryStorage(
    Storage,
    SupportsWakeup,
    SupportsWaitInterrupt,
    SupportsJobScan,
    SupportsUniqueJobs,
    SupportsRateLimits,
    SupportsWorkflows,  # extends SupportsFlows: listed before it (one MRO)
    SupportsFlows,
    SupportsSchedules,
    SupportsThroughput,
    SupportsWorkerRegistry,
    SupportsCancelPoll,
    SupportsRoundRobin,
    SupportsSupersede,
    SupportsDebounce,
    SupportsPause,
    SupportsProgress,
):
    """Thread-safe in-process storage; the reference backend (``memory://``).

    Args:
        retention_ms: how long finished jobs are kept before :meth:`prune` deletes them
            (default 7 days); ``0`` keeps none: the next prune deletes every finished job.
        clock: epoch-milliseconds clock used when an operation gets ``now=None``
            (default: the system clock).

    Its parts (``backends/memory/``): :attr:`store` (the lock, the clock, the jobs and
    their indexes, the ``round_robin`` turns), :attr:`jobs`, :attr:`claiming`,
    :attr:`finishing`, :attr:`reaping`, :attr:`admin`, :attr:`limits`, :attr:`control`
    (supersede, debounce), :attr:`pauses`, :attr:`progress`, :attr:`workers`, and, built
    on first use,
    :attr:`flows` (the reference for
    :class:`~queue_core.storage.abilities.SupportsFlows`), :attr:`workflows` (for
    :class:`~queue_core.storage.abilities.SupportsWorkflows`), :attr:`schedules` and
    :attr:`throughput_counts`.
    """

    flows = Lazy(_build_flows)
    workflows = Lazy(_build_workflows)
    schedules = Lazy(_build_schedules)
    throughput_counts = Lazy(_build_throughput)

    def __init__(
        self,
        *,
        retention_ms: int = DEFAULT_RETENTION_MS,
        clock: Callable[[], int] | None = None,
    ) -> None:
        store = self.store = MemoryStore(clock or system_clock_ms)
        self.control = MemoryControl(store)
        self.limits = MemoryLimits(store, self.control)
        self.pauses = MemoryPauses(store, self._get_flows)
        self.progress = MemoryProgress(store)
        flows = self._get_flows
        self.admin = MemoryAdmin(
            store, self.limits, self.progress, flows, retention_ms, self._get_workflows
        )
        self.jobs = MemoryJobs(store, self.limits, self.pauses, flows)
        self.claiming = MemoryClaiming(store, self.limits, self.pauses, flows)
        self.finishing = MemoryFinishing(store, self.progress, flows)
        self.reaping = MemoryReaping(self.store, self._get_flows)
        self.workers = MemoryWorkers(self.store)

    def _get_flows(self) -> MemoryFlows:
        return self.flows  # the parts hold this getter: flows are built on first use

    def _get_workflows(self) -> MemoryWorkflows:
        return self.workflows

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from ``memory://`` (optionally ``memory://?retention=<duration>``).

        ``retention`` is read by :func:`~queue_core.rules.outcomes.parse_retention`:
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

    @property
    def retention_ms(self) -> int:
        """How long finished jobs are kept (milliseconds)."""
        return self.admin.retention_ms

    def __repr__(self) -> str:
        return f"MemoryStorage(jobs={len(self.store.jobs)}, dead={len(self.store.dead)})"

    # ------------------------------------------------------------------ Storage

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        return self.jobs.enqueue(jobs, now=now)

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        return self.claiming.claim(worker_id, queues, limit, lease_ms, now=now)

    def claim_ahead(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        return self.claiming.claim(worker_id, queues, limit, lease_ms, now=now, ahead=True)

    def start_claimed(
        self, refs: Sequence[LeaseRef], ago_ms: Sequence[int] = (), *, now: int | None = None
    ) -> list[bool]:
        return self.claiming.start_claimed(refs, ago_ms, now=now)

    def give_back(self, refs: Sequence[LeaseRef], *, now: int | None = None) -> list[bool]:
        return self.claiming.give_back(refs, now=now)

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        return self.claiming.renew(refs, lease_ms, now=now)

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        return self.claiming.heartbeat(ref, now=now)

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        return self.finishing.finish(ends, now=now)

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        return self.reaping.reap(now=now, limit=limit)

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        return self.admin.prune(now=now, limit=limit)

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        return self.jobs.cancel(job_id, now=now)

    def get_job(self, job_id: str) -> JobRecord | None:
        return self.jobs.get_job(job_id)

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        return self.jobs.list_attempts(job_id)

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        return self.jobs.count_pending(queues, horizon_ms, now=now)

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        return self.admin.stats(now=now)

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        return self.admin.list_dead(limit, offset, task_name)

    def get_dead(self, dead_id: str) -> DeadJob | None:
        return self.admin.get_dead(dead_id)

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        return self.admin.retry_dead(dead_id, queue, now=now)

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        return self.admin.purge_dead(task_name, before)

    def close(self) -> None:
        """Nothing to release; wakes blocked :meth:`wait_for_jobs` callers. Idempotent."""
        self.store.close()

    # ------------------------------------------------------------------ abilities

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        return self.claiming.wait_for_jobs(queues, timeout)

    def interrupt_waits(self) -> None:
        self.claiming.interrupt_waits()

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        return self.jobs.list_jobs(state=state, queue=queue, limit=limit, offset=offset)

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        return self.limits.enqueue_unique(jobs, now=now)

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        return self.limits.rate_usage(rate_key, window_ms, now=now)

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        return self.flows.start_execution(new, now=now)

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        return self.flows.cancel_execution(execution_id, now=now)

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        return self.flows.get_execution(execution_id)

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        return self.flows.list_executions(flow, state, limit, offset)

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        return self.flows.list_steps(execution_id)

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        return self.flows.get_step_inputs(execution_id, step_id)

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        return self.flows.get_step_inputs_batch(steps)

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        return self.workflows.workflow_state(execution_id)

    def put_memo(
        self,
        ref: LeaseRef,
        execution_id: str,
        key: str,
        value: bytes,
        *,
        now: int | None = None,
    ) -> None:
        return self.workflows.put_memo(ref, execution_id, key, value, now=now)

    def send_event(
        self,
        name: str,
        key: str | None = None,
        data: bytes = b"null",
        *,
        now: int | None = None,
    ) -> int:
        return self.workflows.send_event(name, key, data, now=now)

    def start_child_execution(
        self,
        ref: LeaseRef,
        new: NewExecution,
        step_id: str,
        memo_key: str,
        *,
        now: int | None = None,
    ) -> ExecutionState:
        return self.workflows.start_child_execution(ref, new, step_id, memo_key, now=now)

    def resume_execution(
        self, execution_id: str, from_step: str | None = None, *, now: int | None = None
    ) -> ExecutionState:
        return self.workflows.resume_execution(execution_id, from_step, now=now)

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        return self.schedules.enqueue_tick(schedule, tick_ms, job, now=now)

    def schedule_ticks(self) -> dict[str, int]:
        return self.schedules.schedule_ticks()

    def throughput(
        self,
        since_ms: int,
        bucket_ms: int = THROUGHPUT_RESOLUTION_MS,
        *,
        queues: Sequence[str] | None = None,
        now: int | None = None,
    ) -> list[ThroughputCount]:
        return self.throughput_counts.throughput(since_ms, bucket_ms, queues=queues, now=now)

    def register_worker(self, info: WorkerInfo) -> None:
        return self.workers.register_worker(info)

    def deregister_worker(self, worker_id: str) -> None:
        return self.workers.deregister_worker(worker_id)

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        return self.workers.list_workers(now=now)

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        return self.workers.cancel_requested(refs)

    def round_robin_keys(self, group: str, *, now: int | None = None) -> list[str]:
        return self.claiming.round_robin_keys(group, now=now)

    def enqueue_superseding(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        return self.limits.enqueue_unique(jobs, now=now)

    def enqueue_debounced(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        return self.limits.enqueue_unique(jobs, now=now)

    def pause(self, kind: PauseKind, name: str, *, now: int | None = None) -> bool:
        return self.pauses.pause(kind, name, now=now)

    def resume(self, kind: PauseKind, name: str) -> bool:
        return self.pauses.resume(kind, name)

    def list_paused(self) -> list[Pause]:
        return self.pauses.list_paused()

    def set_progress(
        self, ref: LeaseRef, update: ProgressUpdate, *, now: int | None = None
    ) -> bool:
        return self.progress.set_progress(ref, update, now=now)

    def get_progress(self, job_id: str) -> Progress | None:
        return self.progress.get_progress(job_id)

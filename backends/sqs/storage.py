"""SQS + DynamoDB storage: DynamoDB is the system of record, SQS the delivery channel.

Every decision (readiness, leases, backoff, schedule-to-start, fencing, concurrency) is
judged from DynamoDB attributes against ``now``; SQS never gates correctness, so the
contract suite's explicit clock works and a lost or duplicated message costs at most a
wake-up. See ``docs/backends/sqs.md`` for the design and the request counts.

:class:`SQSStorage` only delegates, one line per method, to its parts: the
:class:`~backends.sqs.store.Store` (clients, table, clock, delivery) and one part per
capability built on it -- :mod:`~backends.sqs.jobs` (enqueue, cancel, reads),
:mod:`~backends.sqs.claiming`, :mod:`~backends.sqs.finishing`, :mod:`~backends.sqs.reaping`,
:mod:`~backends.sqs.admin`, :mod:`~backends.sqs.limits`, :mod:`~backends.sqs.workers`,
:mod:`~backends.sqs.pauses`, :mod:`~backends.sqs.progress`,
:mod:`~backends.sqs.debounce`, :mod:`~backends.sqs.supersede`,
:mod:`~backends.sqs.round_robin`; the
parts few workers use (:mod:`~backends.sqs.flows`, :mod:`~backends.sqs.workflows`,
:mod:`~backends.sqs.schedules`, :mod:`~backends.sqs.throughput`) are built on first use.

URL form::

    sqs://?region=us-east-1&prefix=qc&table=qc-jobs&endpoint_url=http://127.0.0.1:5000
          &retention=7d&visibility=30&hop=900

Credentials come from the usual AWS chain (environment, shared config, instance role);
the URL carries none, and none appear in reprs, logs or errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from backends.sqs.admin import Admin
from backends.sqs.blobs import MAX_RESULT_BYTES
from backends.sqs.claiming import Claiming
from backends.sqs.debounce import Debounce
from backends.sqs.delivery import MAX_DELAY_S
from backends.sqs.finishing import Finishing
from backends.sqs.jobs import Jobs
from backends.sqs.limits import Limits
from backends.sqs.pauses import Pauses
from backends.sqs.progress import JobProgress
from backends.sqs.reaping import Reaping
from backends.sqs.round_robin import RoundRobin
from backends.sqs.store import Store, url_options
from backends.sqs.supersede import Supersede
from backends.sqs.workers import Workers
from backends.sqs.writes import Writes
from queue_core.records.control import Pause, PauseKind, Progress, ProgressUpdate
from queue_core.records.corrupt import split_claimed
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
from queue_core.records.workflows import SuspendedEnd
from queue_core.rules.outcomes import DEFAULT_RETENTION_MS
from queue_core.rules.throughput import THROUGHPUT_RESOLUTION_MS
from queue_core.storage.abilities import (
    SupportsCancelPoll,
    SupportsDebounce,
    SupportsFlows,
    SupportsJobScan,
    SupportsMigrate,
    SupportsPause,
    SupportsProgress,
    SupportsRateLimits,
    SupportsResultLimit,
    SupportsRoundRobin,
    SupportsSchedules,
    SupportsSupersede,
    SupportsThroughput,
    SupportsUniqueJobs,
    SupportsWakeup,
    SupportsWorkerRegistry,
    SupportsWorkflows,
)
from queue_core.storage.lazy import Lazy
from queue_core.storage.protocol import Storage

if TYPE_CHECKING:
    from backends.sqs.flows import SQSFlows
    from backends.sqs.schedules import Schedules
    from backends.sqs.throughput import Throughput
    from backends.sqs.workflows import SQSWorkflows
    from queue_core.records.flows import ExecutionState
    from queue_core.rules.throughput import ThroughputCount
    from queue_core.storage.flows import ExecutionRecord, NewExecution, StepInputs, StepRecord
    from queue_core.storage.workflows import WorkflowState

__all__ = ["SQSStorage"]


def _flows(s: SQSStorage) -> SQSFlows:
    from backends.sqs.flows import SQSFlows

    return SQSFlows(s.store, s.writes)


def _workflows(s: SQSStorage) -> SQSWorkflows:
    from backends.sqs.workflows import SQSWorkflows

    return SQSWorkflows(s.store, s.writes, s.claiming, lambda: s.flows)


def _schedules(s: SQSStorage) -> Schedules:
    from backends.sqs.schedules import Schedules

    return Schedules(s.store, s.writes)


def _throughput(s: SQSStorage) -> Throughput:
    from backends.sqs.throughput import Throughput

    return Throughput(s.store)


class SQSStorage(
    Storage,
    SupportsWakeup,
    SupportsMigrate,
    SupportsJobScan,
    SupportsUniqueJobs,
    SupportsRateLimits,
    SupportsWorkflows,  # extends SupportsFlows: listed before it (one MRO)
    SupportsFlows,
    SupportsSchedules,
    SupportsThroughput,
    SupportsWorkerRegistry,
    SupportsCancelPoll,
    SupportsPause,
    SupportsProgress,
    SupportsDebounce,
    SupportsSupersede,
    SupportsRoundRobin,
    SupportsResultLimit,
):
    """Job storage on DynamoDB (state) and SQS (delivery hints and wake-ups).

    Args:
        region: AWS region name.
        table: DynamoDB table name (created with its indexes when missing).
        prefix: key prefix inside the table and name prefix of the SQS queues, so that
            several independent queue-core deployments (or tests) can share one table.
        endpoint_url: an endpoint for local stacks (moto, LocalStack); ``None`` for AWS.
        retention_ms: how long finished jobs are kept (``prune`` and the TTL attribute).
        visibility_s: the SQS queues' default visibility timeout (seconds).
        hop_s: the longest SQS delay used for one hop (<= 900, SQS's ceiling).
        create: create the table and queues when missing (when the endpoint does not
            answer, at the first call that reaches it: building never fails for that).
        clock: epoch-ms clock used when ``now`` is ``None`` (local clock by default).
        session: a ``boto3.Session`` to use instead of the default credential chain.
    """

    flows = Lazy(_flows)
    workflows = Lazy(_workflows)
    schedules = Lazy(_schedules)
    throughput_counts = Lazy(_throughput)

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        table: str = "queue-core",
        prefix: str = "qc",
        endpoint_url: str | None = None,
        retention_ms: int = DEFAULT_RETENTION_MS,
        visibility_s: int = 30,
        hop_s: int = MAX_DELAY_S,
        create: bool = True,
        clock: Callable[[], int] | None = None,
        session: Any = None,
    ) -> None:
        self.store = Store(
            region=region,
            table=table,
            prefix=prefix,
            endpoint_url=endpoint_url,
            retention_ms=retention_ms,
            visibility_s=visibility_s,
            hop_s=hop_s,
            create=create,
            clock=clock,
            session=session,
        )

        def flows() -> SQSFlows:  # the parts that call it build it on first use
            return self.flows

        self.writes = Writes(self.store)
        self.pauses = Pauses(self.store)
        self.jobs = Jobs(self.store, self.writes, self.pauses, flows)
        self.limits = Limits(self.store, self.jobs)
        self.supersede = Supersede(self.store, self.writes, self.limits)
        self.debounce = Debounce(self.store, self.writes, self.supersede)
        self.round_robin = RoundRobin(self.store, self.pauses, self.debounce, self.limits)
        self.claiming = Claiming(self.store, self.pauses, flows, self.round_robin)
        self.finishing = Finishing(self.store, self.claiming, self.writes, flows)
        self.reaping = Reaping(self.store, self.claiming, self.writes, flows)
        self.admin = Admin(self.store, self.writes, flows, lambda: self.workflows)
        self.workers = Workers(self.store)
        self.progress = JobProgress(self.store)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from ``sqs://?region=…&prefix=…&table=…&endpoint_url=…&retention=…``.

        Recognised query options: ``region`` (default ``us-east-1``), ``table``
        (``queue-core``), ``prefix`` (``qc``), ``endpoint_url``, ``retention`` (a
        duration, default ``7d``), ``visibility`` (seconds, default 30), ``hop``
        (seconds, <= 900), ``create`` (``true``/``false``). Credentials are never taken
        from the URL: the usual AWS chain supplies them.
        """
        return cls(**url_options(url))

    def __repr__(self) -> str:
        s = self.store
        return f"SQSStorage(region={s.region!r}, table={s.table!r}, prefix={s.prefix!r})"

    def migrate(self) -> None:
        """Create the table (indexes, TTL) when missing. Idempotent; safe concurrently."""
        self.store.migrate()

    def close(self) -> None:
        """Release prefetched SQS receipts (visibility 0) and the clients. Idempotent."""
        self.store.close()

    def max_result_bytes(self) -> int:
        """1.5 MB (``SupportsResultLimit``): items and transactions are size-bounded."""
        return MAX_RESULT_BYTES

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Long-poll the queues' SQS queues for up to ``timeout`` seconds.

        A received hint is checked against DynamoDB (one BatchGetItem per receive):
        a due queued job keeps its receipt (prefetched; the next :meth:`claim` binds it
        to the attempt) and wakes the caller; a not-yet-due one is re-sent for the
        remainder (a hop) and deleted; one running elsewhere is hidden until its lease
        would expire; a finished or unknown one, or one moved aside by a pause, is
        deleted. Paused queues are not received from. Spurious wake-ups are allowed.
        """
        return self.store.delivery.wait(self.pauses.waitable(queues), timeout)

    # ------------------------------------------------------------------ jobs

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        return self.round_robin.enqueue(jobs, now=now)

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        return self.round_robin.enqueue_unique(jobs, now=now)

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        return self.limits.rate_usage(rate_key, window_ms, now=now)

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str],
        limit: int,
        lease_ms: int,
        *,
        now: int | None = None,
    ) -> list[ClaimedJob]:
        """A claimed item that does not read as its types (a poison item) is
        dead-lettered alone, reason ``corrupt_record``
        (:func:`~queue_core.records.corrupt.split_claimed`); the others are returned."""
        jobs, corrupt = split_claimed(
            self.claiming.claim(worker_id, queues, limit, lease_ms, now=now)
        )
        if corrupt:
            self.finishing.finish(corrupt)
        return jobs

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        return self.finishing.renew(refs, lease_ms, now=now)

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        return self.finishing.heartbeat(ref, now=now)

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        if any(isinstance(end, SuspendedEnd) for end in ends):  # a workflow's function stops
            return self.workflows.finish(ends, self.finishing.finish, now)
        return self.finishing.finish(ends, now=now)

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        return self.reaping.reap(now=now, limit=limit)

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

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        return self.jobs.list_jobs(state=state, queue=queue, limit=limit, offset=offset)

    # ------------------------------------------------------------------ admin

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        return self.admin.prune(now=now, limit=limit)

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

    # ------------------------------------------------------------------ flow control

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

    def enqueue_superseding(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        return self.supersede.enqueue_superseding(jobs, now=now)

    def enqueue_debounced(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        return self.round_robin.enqueue_debounced(jobs, now=now)

    def round_robin_keys(self, group: str, *, now: int | None = None) -> list[str]:
        return self.round_robin.round_robin_keys(group, now=now)

    # ------------------------------------------------------------------ flows

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
        return self.flows.inputs.get_step_inputs(execution_id, step_id)

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """See :class:`queue_core.storage.abilities.SupportsStepInputsBatch`."""
        return self.flows.inputs.get_step_inputs_batch(steps)

    # ------------------------------------------------------------------ workflows

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        return self.workflows.workflow_state(execution_id)

    def put_memo(
        self, ref: LeaseRef, execution_id: str, key: str, value: bytes, *, now: int | None = None
    ) -> None:
        self.workflows.put_memo(ref, execution_id, key, value, now=now)

    def send_event(
        self, name: str, key: str | None = None, data: bytes = b"null", *, now: int | None = None
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

    # ------------------------------------------------------------------ the rest

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
        self.workers.register_worker(info)

    def deregister_worker(self, worker_id: str) -> None:
        self.workers.deregister_worker(worker_id)

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        return self.workers.list_workers(now=now)

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        return self.workers.cancel_requested(refs)

"""``sqlite:///`` and ``postgresql+psycopg://``: the SQL backend's public class.

:class:`SQLStorage` builds one :class:`~backends.sql.store.Store` (connections,
transactions, clock, statements, and the dialect: what differs between SQLite and
PostgreSQL) and one part per capability on it; each operation delegates to its part:

=======================  ===================================================================
part                     operations
=======================  ===================================================================
``jobs``                 enqueue, renew, heartbeat, cancel, get_job, list_attempts,
                         count_pending, list_jobs (:mod:`.jobs`)
``claiming``             claim (:mod:`.claiming`), a round-robin group's turns through
                         ``round_robin`` (round_robin_keys, :mod:`.roundrobin`)
``finishing``            finish, a step's end with its execution's decision; a held
                         attempt's start or give-back (:mod:`.finishing`)
``reaping``              reap (:mod:`.reaping`)
``admin``                dead letters, stats, prune (:mod:`.admin`)
``limits``               unique jobs, rate limits, concurrency counts; every limited or
                         flow-controlled enqueue, through ``debounce``
                         (:mod:`.debounce`) and ``supersede`` (:mod:`.supersede`)
                         (:mod:`.limits`)
``templates``            enqueue_template (:mod:`.template`)
``workers``              the worker registry, the cancel poll (:mod:`.workers`)
``throughput``           throughput (:mod:`.throughput`)
``pauses``               pause, resume, list_paused; the pauses claims leave out (:mod:`.pauses`)
``progress``             set_progress, get_progress; an end's report (:mod:`.progress`)
``flows``                the flow operations, applied from the core's plan (:mod:`.flows`)
``flow_reads``           the flow reads and workflow_state (:mod:`.flow_reads`)
``workflows``            put_memo, send_event, start_child_execution, resume_execution
                         (:mod:`.workflows`)
``schedules``            periodic ticks (:mod:`.schedules`)
``wakeup``               wait_for_jobs (:mod:`.wakeup`)
=======================  ===================================================================

``flows``, ``flow_reads``, ``workflows``, ``schedules`` and ``wakeup`` are built on first use
(:class:`~queue_core.storage.lazy.Lazy`): a worker that runs plain jobs never imports them.
What a decision or a reap does to a job is decided by :mod:`queue_core.rules`; the parts
apply it atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from backends.sql.admin import Admin
from backends.sql.claiming import Claiming
from backends.sql.debounce import Debounces
from backends.sql.finishing import Finishing
from backends.sql.jobs import Jobs
from backends.sql.limits import Limits
from backends.sql.pauses import Pauses
from backends.sql.progress import Progresses
from backends.sql.reaping import Reaping
from backends.sql.roundrobin import RoundRobin
from backends.sql.store import Store
from backends.sql.supersede import Supersedes
from backends.sql.template import Templates
from backends.sql.throughput import Throughput
from backends.sql.url import split_url
from backends.sql.vacuum import Vacuum
from backends.sql.workers import Workers
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
from queue_core.rules.outcomes import DEFAULT_RETENTION_MS
from queue_core.rules.throughput import THROUGHPUT_RESOLUTION_MS, ThroughputCount
from queue_core.storage.abilities import (
    SupportsCancelPoll,
    SupportsFlows,
    SupportsJobScan,
    SupportsMigrate,
    SupportsRateLimits,
    SupportsSchedules,
    SupportsSchemaVersion,
    SupportsTemplateEnqueue,
    SupportsThroughput,
    SupportsUniqueJobs,
    SupportsWaitInterrupt,
    SupportsWakeup,
    SupportsWorkerRegistry,
    SupportsWorkflows,
)
from queue_core.storage.control import (
    SupportsDebounce,
    SupportsPause,
    SupportsProgress,
    SupportsRoundRobin,
    SupportsSupersede,
)
from queue_core.storage.lazy import Lazy
from queue_core.storage.protocol import Storage

if TYPE_CHECKING:
    from typing_extensions import Self

    from backends.sql.flow_reads import FlowReads
    from backends.sql.flows import Flows
    from backends.sql.schedules import Schedules
    from backends.sql.wakeup import PostgresWakeup, SQLiteWakeup
    from backends.sql.workflows import Workflows
    from queue_core.records.flows import ExecutionState
    from queue_core.storage.flows import ExecutionRecord, NewExecution, StepInputs, StepRecord
    from queue_core.storage.workflows import WorkflowState

__all__ = ["DEFAULT_RETENTION_MS", "SQLStorage"]


def _flows(storage: SQLStorage) -> Flows:
    from backends.sql.flows import Flows  # with the first flow operation

    return Flows(storage.store, storage.limits)


def _flow_reads(storage: SQLStorage) -> FlowReads:
    from backends.sql.flow_reads import FlowReads

    return FlowReads(storage.store)


def _workflows(storage: SQLStorage) -> Workflows:
    from backends.sql.workflows import Workflows

    return Workflows(storage.store, lambda: storage.flows)


def _schedules(storage: SQLStorage) -> Schedules:
    from backends.sql.schedules import Schedules

    return Schedules(storage.store, storage.limits)


def _wakeup(storage: SQLStorage) -> SQLiteWakeup | PostgresWakeup:
    from backends.sql.wakeup import wakeup_of

    return wakeup_of(storage.store, storage.pauses)


def _check_retention(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"retention_ms must be an int >= 0 (0 keeps no finished job), got {value!r}",
            code="invalid_option",
            field="retention_ms",
            value=value,
        )
    return value


class SQLStorage(
    Storage,
    SupportsWakeup,
    SupportsWaitInterrupt,
    SupportsTemplateEnqueue,
    SupportsMigrate,
    SupportsSchemaVersion,
    SupportsJobScan,
    SupportsUniqueJobs,
    SupportsRateLimits,
    SupportsWorkflows,
    SupportsFlows,
    SupportsSchedules,
    SupportsThroughput,
    SupportsWorkerRegistry,
    SupportsCancelPoll,
    SupportsProgress,
    SupportsPause,
    SupportsDebounce,
    SupportsSupersede,
    SupportsRoundRobin,
):
    """Storage on SQLite (embedded, the default) or PostgreSQL.

    The schema is created (or upgraded) on first use; :meth:`migrate` does it explicitly.
    Wake-ups: PostgreSQL ``LISTEN/NOTIFY``; on SQLite a 1-4 ms poll of
    ``PRAGMA data_version`` that sees commits from any process.

    Args:
        url: ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, ``sqlite://`` (in
            memory, this process only), ``postgresql+psycopg://user:password@host:5432/db``
            (``postgresql://`` means psycopg too). A ``retention=<duration>`` query
            parameter sets ``retention_ms`` (:func:`~queue_core.rules.outcomes.parse_retention`:
            ``7d``, ``1d12h``, ``12h``, ``3600`` seconds, ``0`` = keep no finished job).
        retention_ms: how long finished jobs are kept before :meth:`prune` deletes them
            (an int >= 0); overrides the URL's ``retention``; default 7 days.
        pool_size: connections the schema engine keeps open (operations run on one
            connection per thread).
        max_overflow: extra schema-engine connections allowed beyond ``pool_size``.
        busy_timeout_ms: SQLite only: how long a writer waits for another process's
            write lock before the operation fails with
            :class:`~queue_core.records.errors.StorageUnavailable`.
        echo: log the schema engine's statements (SQLAlchemy's ``echo``).

    Raises:
        ConfigError: a malformed URL, an unsupported scheme or a bad retention.
    """

    flows = Lazy(_flows)
    flow_reads = Lazy(_flow_reads)
    workflows = Lazy(_workflows)
    schedules = Lazy(_schedules)
    wakeup = Lazy(_wakeup)

    def __init__(
        self,
        url: str,
        *,
        retention_ms: int | None = None,
        pool_size: int = 5,
        max_overflow: int = 10,
        busy_timeout_ms: int = 30_000,
        echo: bool = False,
    ) -> None:
        sa_url, url_retention = split_url(url)
        retention = retention_ms if retention_ms is not None else url_retention
        self.retention_ms = _check_retention(
            retention if retention is not None else DEFAULT_RETENTION_MS
        )
        self.store = store = Store(
            sa_url, busy_timeout_ms=busy_timeout_ms, engine_options=(pool_size, max_overflow, echo)
        )
        self.dialect = store.dialect.name
        """``"sqlite"`` or ``"postgresql"``."""
        self.limits = Limits(store, Debounces(store), Supersedes(store))
        self.admin = Admin(store, self.retention_ms, lambda: self.workflows)
        self.pauses = Pauses(store)
        self.jobs = Jobs(store, self.limits, lambda: self.flows, self.pauses)
        self.round_robin = RoundRobin(store)
        self.claiming = Claiming(
            store,
            lambda ends: self.finishing.finish(ends),
            lambda: self.flows,
            self.pauses,
            self.round_robin,
        )
        self.progress = Progresses(store)
        self.finishing = Finishing(store, self.admin, lambda: self.flows, self.progress)
        self.reaping = Reaping(store, self.admin, lambda: self.flows)
        self.vacuum = Vacuum(store) if self.dialect == "postgresql" else None
        """PostgreSQL: ``qc_jobs`` vacuumed after a reap when dead rows pile up."""
        self.templates = Templates(store, self.jobs)
        self.workers = Workers(store)
        self.counts = Throughput(store)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from a URL (see the class docstring for the accepted forms)."""
        return cls(url)

    def __repr__(self) -> str:
        return repr(self.store)

    # ------------------------------------------------------------------ Storage

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue`."""
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
        """See :meth:`queue_core.storage.protocol.Storage.claim`."""
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
        """See :meth:`queue_core.storage.abilities.SupportsPrefetch.claim_ahead`."""
        return self.claiming.claim(worker_id, queues, limit, lease_ms, now=now, ahead=True)

    def start_claimed(
        self, refs: Sequence[LeaseRef], ago_ms: Sequence[int] = (), *, now: int | None = None
    ) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsPrefetch.start_claimed`."""
        return self.finishing.start_claimed(refs, ago_ms, now=now)

    def give_back(self, refs: Sequence[LeaseRef], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsGiveBack.give_back`."""
        return self.finishing.give_back(refs, now=now)

    def start_and_finish(
        self,
        refs: Sequence[LeaseRef],
        ago_ms: Sequence[int],
        ends: Sequence[AttemptEnd],
        *,
        now: int | None = None,
    ) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsStartWithFinish.start_and_finish`."""
        return self.finishing.finish(ends, now=now, started=(refs, ago_ms))

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.protocol.Storage.renew`."""
        return self.jobs.renew(refs, lease_ms, now=now)

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.protocol.Storage.heartbeat`."""
        return self.jobs.heartbeat(ref, now=now)

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.protocol.Storage.finish`."""
        return self.finishing.finish(ends, now=now)

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.protocol.Storage.reap`. On PostgreSQL, then
        ``qc_jobs`` is vacuumed if its dead rows call for it (:mod:`backends.sql.vacuum`)."""
        reaped = self.reaping.reap(now=now, limit=limit)
        if self.vacuum is not None:
            self.vacuum.maybe()
        return reaped

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.prune`."""
        return self.admin.prune(now=now, limit=limit)

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.protocol.Storage.cancel`."""
        return self.jobs.cancel(job_id, now=now)

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_job`."""
        return self.jobs.get_job(job_id)

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.protocol.Storage.list_attempts`."""
        return self.jobs.list_attempts(job_id)

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.count_pending`."""
        return self.jobs.count_pending(queues, horizon_ms, now=now)

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.protocol.Storage.stats`."""
        return self.admin.stats(now=now)

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """See :meth:`queue_core.storage.protocol.Storage.list_dead`."""
        return self.admin.list_dead(limit, offset, task_name)

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_dead`."""
        return self.admin.get_dead(dead_id)

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """See :meth:`queue_core.storage.protocol.Storage.retry_dead`."""
        return self.admin.retry_dead(dead_id, queue, now=now)

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.purge_dead`."""
        return self.admin.purge_dead(task_name, before)

    def close(self) -> None:
        """Release connections (per-thread connections, the waiter's, the schema engine).
        Idempotent."""
        self.store.close()

    # ------------------------------------------------------------------ abilities

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """See :meth:`queue_core.storage.abilities.SupportsWakeup.wait_for_jobs`."""
        return self.wakeup.wait_for_jobs(queues, timeout)

    def interrupt_waits(self) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWaitInterrupt.interrupt_waits`."""
        self.wakeup.interrupt_waits()

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], *, now: int | None = None
    ) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsTemplateEnqueue.enqueue_template`."""
        self.templates.enqueue_template(template, jobs, now=now)

    def migrate(self) -> None:
        """Create or upgrade the schema. Idempotent; safe to run concurrently.

        Raises:
            SchemaMismatch: the stored schema is newer than this code.
            StorageUnavailable: the database cannot be reached.
        """
        self.store.migrate()

    def schema_version(self) -> int:
        """The schema version stored in the database (0 when there is none yet)."""
        return self.store.schema_version()

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (latest enqueued) first, optionally filtered."""
        return self.jobs.list_jobs(state=state, queue=queue, limit=limit, offset=offset)

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.abilities.SupportsUniqueJobs.enqueue_unique`."""
        return self.limits.enqueue_unique(jobs, now=now)

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsRateLimits.rate_usage`."""
        return self.limits.rate_usage(rate_key, window_ms, now=now)

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.start_execution`."""
        return self.flows.start_execution(new, now=now)

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.cancel_execution`."""
        return self.flows.cancel_execution(execution_id, now=now)

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_execution`."""
        return self.flow_reads.get_execution(execution_id)

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_executions`."""
        return self.flow_reads.list_executions(flow, state, limit, offset)

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_steps`."""
        return self.flow_reads.list_steps(execution_id)

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_step_inputs`."""
        return self.flow_reads.get_step_inputs(execution_id, step_id)

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """See :class:`queue_core.storage.abilities.SupportsStepInputsBatch`."""
        return self.flow_reads.get_step_inputs_batch(steps)

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.workflow_state`."""
        return self.flow_reads.workflow_state(execution_id)

    def put_memo(
        self, ref: LeaseRef, execution_id: str, key: str, value: bytes, *, now: int | None = None
    ) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.put_memo`."""
        self.workflows.put_memo(ref, execution_id, key, value, now=now)

    def send_event(
        self, name: str, key: str | None = None, data: bytes = b"null", *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.send_event`."""
        return self.workflows.send_event(name, key, data, now=now)

    def start_child_execution(
        self, ref: LeaseRef, new: NewExecution, step_id: str, memo_key: str, *,
        now: int | None = None,
    ) -> ExecutionState:  # fmt: skip
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.start_child_execution`."""
        return self.workflows.start_child_execution(ref, new, step_id, memo_key, now=now)

    def resume_execution(
        self, execution_id: str, from_step: str | None = None, *, now: int | None = None
    ) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.resume_execution`."""
        return self.workflows.resume_execution(execution_id, from_step, now=now)

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.enqueue_tick`."""
        return self.schedules.enqueue_tick(schedule, tick_ms, job, now=now)

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.schedule_ticks`."""
        return self.schedules.schedule_ticks()

    def throughput(
        self,
        since_ms: int,
        bucket_ms: int = THROUGHPUT_RESOLUTION_MS,
        *,
        queues: Sequence[str] | None = None,
        now: int | None = None,
    ) -> list[ThroughputCount]:
        """See :meth:`queue_core.storage.abilities.SupportsThroughput.throughput`."""
        return self.counts.throughput(since_ms, bucket_ms, queues=queues, now=now)

    def register_worker(self, info: WorkerInfo) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.register_worker`."""
        self.workers.register_worker(info)

    def deregister_worker(self, worker_id: str) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.deregister_worker`."""
        self.workers.deregister_worker(worker_id)

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.list_workers`."""
        return self.workers.list_workers(now=now)

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """See :meth:`queue_core.storage.abilities.SupportsCancelPoll.cancel_requested`."""
        return self.workers.cancel_requested(refs)

    # ------------------------------------------------------------------ flow control

    def set_progress(
        self, ref: LeaseRef, update: ProgressUpdate, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.control.SupportsProgress.set_progress`."""
        return self.progress.set_progress(ref, update, now=now)

    def get_progress(self, job_id: str) -> Progress | None:
        """See :meth:`queue_core.storage.control.SupportsProgress.get_progress`."""
        return self.progress.get_progress(job_id)

    def pause(self, kind: PauseKind, name: str, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.pause`."""
        return self.pauses.pause(kind, name, now=now)

    def resume(self, kind: PauseKind, name: str) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.resume`."""
        return self.pauses.resume(kind, name)

    def list_paused(self) -> list[Pause]:
        """See :meth:`queue_core.storage.control.SupportsPause.list_paused`."""
        return self.pauses.list_paused()

    def enqueue_superseding(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """See :meth:`queue_core.storage.control.SupportsSupersede.enqueue_superseding`."""
        return self.limits.enqueue_unique(jobs, now=now)

    def enqueue_debounced(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """See :meth:`queue_core.storage.control.SupportsDebounce.enqueue_debounced`."""
        return self.limits.enqueue_unique(jobs, now=now)

    def round_robin_keys(self, group: str, *, now: int | None = None) -> list[str]:
        """See :meth:`queue_core.storage.control.SupportsRoundRobin.round_robin_keys`."""
        return self.round_robin.round_robin_keys(group, now=now)

"""Every optional storage ability (``Supports*``), each a small protocol the core checks
for with ``isinstance`` and degrades without (SPEC §8).

A backend author implements the ones its storage can do atomically; the published contract
suite (:mod:`queue_core.testing`) runs an ability's cases only on a storage that has it.
SPEC §13's flow control is in :mod:`.control`, held claims in :mod:`.claims` (re-exported).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from queue_core.rules.throughput import THROUGHPUT_RESOLUTION_MS
from queue_core.storage.claims import (
    SupportsGiveBack,
    SupportsPrefetch,
    SupportsResultLimit,
    SupportsStartWithFinish,
    SupportsWaitInterrupt,
)
from queue_core.storage.control import (
    SupportsDebounce,
    SupportsPause,
    SupportsProgress,
    SupportsRoundRobin,
    SupportsSupersede,
)

if TYPE_CHECKING:
    from queue_core.records.flows import ExecutionState
    from queue_core.records.jobs import ClaimedJob, Enqueued, JobRecord, JobState, LeaseRef, NewJob
    from queue_core.records.workers import WorkerInfo
    from queue_core.rules.throughput import ThroughputCount
    from queue_core.storage.flows import (
        ExecutionRecord,
        NewExecution,
        StepInputs,
        StepRecord,
    )
    from queue_core.storage.workflows import WorkflowState


__all__ = [
    "SupportsCancelPoll",
    "SupportsDebounce",
    "SupportsFlows",
    "SupportsGiveBack",
    "SupportsJobScan",
    "SupportsMigrate",
    "SupportsPause",
    "SupportsPrefetch",
    "SupportsProgress",
    "SupportsRateLimits",
    "SupportsResultLimit",
    "SupportsRoundRobin",
    "SupportsSchedules",
    "SupportsSchemaVersion",
    "SupportsStartWithFinish",
    "SupportsStepInputsBatch",
    "SupportsSupersede",
    "SupportsTemplateEnqueue",
    "SupportsThroughput",
    "SupportsUniqueJobs",
    "SupportsWaitClaim",
    "SupportsWaitInterrupt",
    "SupportsWakeup",
    "SupportsWorkerRegistry",
    "SupportsWorkflows",
]


@runtime_checkable
class SupportsWakeup(Protocol):
    """Push wake-ups: an idle worker blocks until a job may be ready instead of polling."""

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may have become ready in one of
        ``queues``; ``True`` if woken, ``False`` on timeout. Spurious wake-ups are allowed.
        A delayed job already stored ends the wait when it falls due.

        Contract:
            OptionalAbilitiesContract.test_wait_for_jobs_wakes_on_enqueue,
            OptionalAbilitiesContract.test_wait_for_jobs_ends_when_a_delayed_job_falls_due
        """
        ...


@runtime_checkable
class SupportsWaitClaim(Protocol):
    """Wake-up and claim in one step, for an idle worker (fewer round trips than
    :meth:`~SupportsWakeup.wait_for_jobs` followed by
    :meth:`~queue_core.storage.protocol.Storage.claim`)."""

    def wait_and_claim(
        self, worker_id: str, queues: Sequence[str], limit: int, lease_ms: int, timeout: float
    ) -> list[ClaimedJob]:
        """Block up to ``timeout`` seconds until a job may be ready in one of ``queues``
        (as ``wait_for_jobs``; at once when one is ready now), then claim up to ``limit``
        of them at the storage's time (as ``claim``). A timeout or a spurious wake-up
        claims what is ready then, often nothing: ``[]``.

        Contract:
            WaitClaimContract (opt-in: add it to your test class)
        """
        ...


@runtime_checkable
class SupportsTemplateEnqueue(Protocol):
    """A batch of jobs that differ only in id, payload and lost delay (``Task.map``'s)
    stored without a :class:`~queue_core.records.jobs.NewJob` per job."""

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], *, now: int | None = None
    ) -> None:
        """Store one job per ``(id, payload, lost_delay_ms)`` of ``jobs``: ``template``
        with those three fields replaced (its other fields, id included, are ignored).
        Exactly what :meth:`~queue_core.storage.protocol.Storage.enqueue` of those jobs
        (:func:`queue_core.records.job_factory.expand_template`) at ``now`` stores: the
        same rows, indexes, counts and wake-ups; all-or-nothing (a repeated or existing
        id stores nothing and raises ``StorageError``).

        Contract:
            TemplateEnqueueContract (opt-in: add it to your test class)
        """
        ...


@runtime_checkable
class SupportsMigrate(Protocol):
    """Explicit schema management (``queue-core migrate``)."""

    def migrate(self) -> None:
        """Create or upgrade the schema. Idempotent (what is stored stays); concurrency-safe.

        Contract:
            OptionalAbilitiesContract.test_migrate_twice_keeps_what_is_stored
        """
        ...


@runtime_checkable
class SupportsSchemaVersion(Protocol):
    """A storage whose schema can be absent: read-only tools check before reading."""

    def schema_version(self) -> int:
        """The stored schema version; ``0`` when the storage holds no queue-core schema.
        Never creates the schema.

        Contract:
            OptionalAbilitiesContract.test_schema_version_is_stable_across_migrations
        """
        ...


@runtime_checkable
class SupportsJobScan(Protocol):
    """Bulk reads for dashboards and the CLI."""

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """A page of jobs, newest (last enqueued) first, optionally filtered.

        Contract:
            OptionalAbilitiesContract.test_list_jobs_pages_newest_first_with_filters
        """
        ...


@runtime_checkable
class SupportsUniqueJobs(Protocol):
    """Unique jobs (SPEC §11): enqueue that reports which job each new job became.

    :meth:`~queue_core.storage.protocol.Storage.enqueue` of a storage with this ability honours
    :attr:`~queue_core.records.jobs.NewJob.unique_key` the same way (it only cannot say which
    job holds the key); the core calls :meth:`enqueue_unique` for jobs with a key.
    """

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """:meth:`~queue_core.storage.protocol.Storage.enqueue`, plus unique keys, returning
        one :class:`~queue_core.records.jobs.Enqueued` per job.

        A job with ``unique_key`` whose key is held at ``now`` by another job (decided by
        :func:`queue_core.rules.limits.unique_holds` from that job's state, enqueue time
        and ``unique_for_ms``) stores nothing and yields ``Enqueued(holder_id,
        holder_state, existing=True)``; otherwise it is stored and becomes the key's
        holder. Within one batch an earlier job holds its key against later ones.

        Atomicity: the holder lookup and the store are one atomic step, so any number of
        concurrent enqueues with one key store exactly one job while it holds the key.

        Contract:
            UniqueContract
        """
        ...


@runtime_checkable
class SupportsRateLimits(Protocol):
    """Rate limits (SPEC §11, §13): :meth:`~queue_core.storage.protocol.Storage.claim`
    honours ``rate_key``, by body start.

    A job with :attr:`~queue_core.records.jobs.NewJob.rate_key` is claimed only when
    :func:`queue_core.rules.limits.rate_grant` allows it at the claim's ``now`` given the
    key's kept times; the claim stores the ``kept`` times it returns (each granted claim
    keeps ``now + RATE_START_MS``, the latest time its body may start) in the same atomic
    step (so the limit holds across all workers), and returns the job with ``start_by``
    set to that time (:attr:`~queue_core.records.jobs.ClaimedJob.start_by`). A job not
    allowed stays ``queued`` and does not hold back other jobs. Jobs without a key are
    claimed exactly as before (``start_by`` ``None``). The key's rate comes with each job
    (``rate_limit``, ``rate_window_ms``): many tasks may share one key (a named limit), and
    a key per value of a key function is one more key.
    """

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """How many kept times of ``rate_key`` lie after ``now - window_ms`` (claims whose
        body started, or may still start, in the window ending at ``now``).

        Contract:
            RateLimitContract
        """
        ...


@runtime_checkable
class SupportsFlows(Protocol):
    """Flow executions in storage (SPEC §7). Every in-repo backend is meant to implement
    it; ``queue.flow(...)`` on a storage without it raises ``ConfigError`` ``unsupported``.

    Besides these operations, a storage with flows changes the core operations for step
    jobs (jobs with an ``execution_id``), each in the same atomic step as the event:

    * ``claim`` marks the step ``running`` and returns, for a step job, ``deadline =
      min(attempt deadline, flow_deadline_at)`` and the three flow fields of
      :class:`~queue_core.records.jobs.ClaimedJob`;
    * ``finish``, ``reap`` and ``cancel``: each change of a step job's state goes
      through :func:`queue_core.rules.flows.decide.step_ended` and the returned
      :class:`~queue_core.rules.flows.decide.Transition` is applied
      (:func:`~queue_core.rules.flows.decide.apply` is the reference for its effect);
    * ``reap`` also ends running executions whose deadline passed
      (:func:`~queue_core.rules.flows.decide.advance`), with no worker alive, and reports
      each step job it timed out as a ``ReapedJob`` (outcome and state ``timed_out``,
      reason ``flow_timeout``); a late ``finish`` / ``renew`` of such an attempt is
      refused;
    * ``prune`` removes finished executions older than the retention with their steps;
    * ``retry_dead`` of a step job's entry is refused (``ConfigError``
      ``invalid_option``, from :func:`~queue_core.rules.outcomes.replay_job`), unless
      the storage also has :class:`SupportsWorkflows` (then it resumes the execution).

    Contract:
        FlowContract (FlowStartContract, FlowEndContract, FlowConcurrencyContract),
        WorkerContract.test_cancel_poll_sees_a_cancelled_flow_execution
    """

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """Store the execution and its pending steps; admit it
        (:func:`~queue_core.rules.flows.decide.admit` over the active executions with the same
        ``conc_key``); when admitted running, apply :func:`~queue_core.rules.flows.decide.start`
        (deadline set, root steps released: their jobs enqueued). Returns ``running``,
        ``queued`` or ``skipped``. Atomic; concurrent starts never exceed the limit.
        A ``skipped`` execution is stored finished (reason ``concurrency_limit``), its
        steps ``not_run``.

        Contract:
            FlowStartContract.test_start_releases_only_the_roots, FlowConcurrencyContract
        """
        ...

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """Apply :func:`~queue_core.rules.flows.decide.cancel`; return the state afterwards
        (``cancelling`` while running steps stop, ``cancelled``, or the finished state
        unchanged). Raises :class:`~queue_core.records.errors.NotFound` for an unknown id.

        Contract:
            FlowEndContract.test_cancel_stops_running_steps_then_ends_cancelled,
            FlowEndContract.test_cancel_with_nothing_running_ends_at_once
        """
        ...

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """One execution, or ``None``.

        Contract:
            FlowStartContract.test_start_releases_only_the_roots
        """
        ...

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """A page of executions, newest first, optionally of one flow / in one state.

        Contract:
            FlowConcurrencyContract.test_list_executions_newest_first_with_filters_and_pages
        """
        ...

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """The steps of an execution in definition order (empty for an unknown id).

        Contract:
            FlowStartContract.test_start_releases_only_the_roots
        """
        ...

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """The execution input and the serialized results of ``step_id``'s dependencies.
        Raises :class:`~queue_core.records.errors.NotFound` for an unknown execution or step.

        Contract:
            FlowStartContract.test_diamond_releases_each_step_once_after_its_dependencies
        """
        ...


@runtime_checkable
class SupportsStepInputsBatch(Protocol):
    """The inputs of several flow steps in one read, for a worker that claimed them
    together (it reads them once per claimed batch, not once per step)."""

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """For each ``(execution id, step id)``, what ``get_step_inputs`` returns, in
        order; ``None`` for a step it would refuse (unknown execution or step: read it
        alone for the error).

        Contract:
            FlowStartContract.test_step_inputs_in_a_batch_equal_each_read_alone
        """
        ...


@runtime_checkable
class SupportsWorkflows(SupportsFlows, Protocol):
    """Durable workflows and resuming executions, on top of :class:`SupportsFlows`.
    ``@queue.workflow`` and ``execution.retry()`` / ``.replay()`` on a storage without it
    raise ``ConfigError`` ``unsupported``. The page
    ``docs/backend-abilities/workflows.md`` is the backend author's guide.

    A workflow execution is a flow execution (``NewExecution.kind == "workflow"``) whose
    one declared step, the function step (index 0, id ``main``), runs the function;
    children are steps added at run time. Every change is decided by the core
    (:mod:`queue_core.rules.flows.decide` for ``kind == "workflow"``,
    :mod:`queue_core.rules.flows.workflow`) and applied as
    :mod:`queue_core.rules.flows.plan` operations by the one flows interpreter, atomically
    with its cause. Besides these operations, a storage with workflows changes:

    * ``finish`` of a :class:`~queue_core.records.workflows.SuspendedEnd`: the attempt is
      recorded ``suspended``, its decision applied (``RETRY``, spends no attempt), then
      :func:`~queue_core.rules.flows.workflow.suspend_ops` with the first stored event
      that :func:`~queue_core.rules.flows.workflow.first_delivery` finds for its wait,
      all in the same atomic step;
    * ``claim`` of a workflow step's job passes the execution's head to
      :func:`~queue_core.rules.flows.plan.claim_ops` (a ``waiting`` execution is
      ``running`` again); ``plan.step_end`` gets ``ExecutionHead.kind`` (a workflow is
      judged on its full view: its step index is that of its current steps, children
      included, never a cached per-spec index);
    * ``reap`` also times out ``waiting`` executions past their deadline;
    * ``prune`` removes memos, waiters, child jobs and sub-executions with their
      execution (never a workflow's job while its execution is stored), and events sent
      before the retention cutoff;
    * ``retry_dead`` of a step job's entry resumes its execution as
      :meth:`resume_execution` does (refused, entry kept, when it cannot) and returns the
      step's job id;
    * the plan operations of workflows (:class:`~queue_core.rules.flows.plan.PutMemo`,
      ``DropMemos``, ``AddStep``, ``SetReady``, ``Wake``, ``SetAwaiting``, ``AddWaiter``,
      ``DropWaiter``, ``Reopened``, ``SetUnmet``) and the extended ``Release``,
      ``Finished``, ``EndJob`` and ``RequestCancel``.

    Contract:
        DurableContract (WorkflowSuspendContract, WorkflowEventContract,
        WorkflowChildrenContract, ResumeContract)
    """

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        """The execution, its steps, its memos and the jobs of its steps, read at once
        (what an attempt of the function step reads when it starts); ``None`` for an
        unknown id.

        Contract:
            WorkflowSuspendContract.test_a_workflow_starts_its_function_step,
            WorkflowSuspendContract.test_a_memo_is_stored_fenced_and_read_back
        """
        ...

    def put_memo(
        self,
        ref: LeaseRef,
        execution_id: str,
        key: str,
        value: bytes,
        *,
        now: int | None = None,
    ) -> None:
        """Store memo ``key`` = ``value`` of ``execution_id`` (``ctx.step``'s result),
        fenced: only while ``ref`` is the current attempt of a step job of that
        execution. A new key takes the execution's next memo number, a replaced value
        keeps its number; ``at = now``. Atomic.

        Raises:
            LeaseLost: ``ref`` is not the current attempt (reaped, finished,
                superseded) or not of that execution; nothing is stored.

        Contract:
            WorkflowSuspendContract.test_a_memo_is_stored_fenced_and_read_back
        """
        ...

    def send_event(
        self,
        name: str,
        key: str | None = None,
        data: bytes = b"null",
        *,
        now: int | None = None,
    ) -> int:
        """Store the event (kept until the retention prunes it) and deliver it to every
        registered wait of ``name`` it reaches at ``now``
        (:func:`~queue_core.rules.flows.workflow.delivers`): each such wait's execution
        gets :func:`~queue_core.rules.flows.workflow.deliver_ops` (the data memo, the
        wait removed, its function woken). All in one atomic step; each wait receives
        one event, once. Returns how many waits it ended.

        Contract:
            WorkflowEventContract
        """
        ...

    def start_child_execution(
        self,
        ref: LeaseRef,
        new: NewExecution,
        step_id: str,
        memo_key: str,
        *,
        now: int | None = None,
    ) -> ExecutionState:
        """``ctx.run_flow``: in one atomic step, fenced by ``ref`` (an attempt of the
        parent's function step), start ``new`` (``parent_id``/``parent_idx`` set, id
        :func:`~queue_core.storage.workflows.sub_execution_id`) as
        :meth:`SupportsFlows.start_execution` does, and apply
        :func:`~queue_core.rules.flows.workflow.child_flow_ops` to the parent (its step
        ``parent_idx``, which must be the parent's next index, and memo ``memo_key``).
        Returns the sub-execution's state. When the sub-execution finishes, its
        ``Finished`` ends the parent's step (see :mod:`~queue_core.rules.flows.plan`).

        Raises:
            LeaseLost: ``ref`` is not the current attempt; nothing is stored.
            StorageError: ``parent_idx`` is not the parent's next step index.

        Contract:
            WorkflowChildrenContract.test_a_sub_execution_end_wakes_its_parent
        """
        ...

    def resume_execution(
        self, execution_id: str, from_step: str | None = None, *, now: int | None = None
    ) -> ExecutionState:
        """``execution.retry()`` (``from_step`` ``None``) or ``.replay(from_step)`` of a
        flow or workflow execution: :func:`~queue_core.rules.flows.workflow.check_resume`,
        then :func:`~queue_core.rules.flows.workflow.resume_ops` with the admission of
        :func:`~queue_core.rules.flows.decide.admit` over the other active executions of
        its concurrency key and, for a workflow, its memos; one atomic step. Returns the
        state afterwards (``running`` or ``queued``).

        Raises:
            NotFound: no execution with that id.
            ConfigError: ``invalid_option`` (not resumable, unknown step) or
                ``concurrency_limit`` (a full ``skip`` limit); nothing changed.

        Contract:
            ResumeContract
        """
        ...


@runtime_checkable
class SupportsSchedules(Protocol):
    """Storage that enqueues periodic ticks exactly once (SPEC §11).

    The contract suite's ``ScheduleContract`` holds every backend to it.
    """

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """Atomically: when ``tick_ms`` is later than the last tick stored for
        ``schedule`` (or none is stored), store ``tick_ms`` as its last tick and enqueue
        ``job`` (as :meth:`~queue_core.storage.protocol.Storage.enqueue` would) and return
        ``True``; otherwise store nothing and return ``False``. Any number of callers
        may race on one tick: exactly one stores it. A job stored ``skipped`` (a full
        ``skip`` concurrency key) still stores its tick.

        Contract:
            ScheduleContract
        """
        ...

    def schedule_ticks(self) -> dict[str, int]:
        """The last tick stored per schedule name (epoch ms); one entry per schedule.

        Contract:
            ScheduleContract.test_a_first_tick_enqueues_its_job_and_is_the_last_tick,
            ScheduleContract.test_storage_keeps_one_entry_per_schedule_not_per_tick
        """
        ...


@runtime_checkable
class SupportsThroughput(Protocol):
    """Enqueue and finish counts per queue and time bucket (see the module docs)."""

    def throughput(
        self,
        since_ms: int,
        bucket_ms: int = THROUGHPUT_RESOLUTION_MS,
        *,
        queues: Sequence[str] | None = None,
        now: int | None = None,
    ) -> list[ThroughputCount]:
        """The non-zero counts of the buckets from the one holding ``since_ms`` up to
        ``now`` (events at or before ``now``), for ``queues`` (all when ``None``),
        sorted by queue, bucket and kind.

        ``bucket_ms`` must be a positive multiple of
        :data:`~queue_core.rules.throughput.THROUGHPUT_RESOLUTION_MS`
        (:func:`~queue_core.rules.throughput.check_bucket_ms`: ``ConfigError`` otherwise).
        Counts older than :data:`~queue_core.rules.throughput.THROUGHPUT_WINDOW_MS` before
        ``now`` may be missing. Only reads. Shape the answer with
        :func:`~queue_core.rules.throughput.fold_counts` from ``(queue, t, kind, n)`` events.

        Contract:
            ThroughputContract
        """
        ...


@runtime_checkable
class SupportsWorkerRegistry(Protocol):
    """Workers register themselves in storage, so they can be listed from outside."""

    def register_worker(self, info: WorkerInfo) -> None:
        """Store ``info`` under ``info.id``, replacing an earlier record (register and
        refresh are the same call); each record keeps its own ``ttl_ms``.

        Contract:
            WorkerContract.test_a_registered_worker_is_listed_with_every_field,
            WorkerContract.test_refresh_replaces_the_record,
            WorkerContract.test_a_record_keeps_its_own_ttl
        """
        ...

    def deregister_worker(self, worker_id: str) -> None:
        """Remove the record of ``worker_id`` (nothing happens when there is none).

        Contract:
            WorkerContract.test_deregister_removes_only_that_worker
        """
        ...

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """The live workers at ``now`` (:func:`~queue_core.rules.workers.is_live`), sorted by
        host, pid, id (:func:`~queue_core.rules.workers.live_workers` splits and sorts
        them). Records no longer live are not returned, and may be deleted.

        Contract:
            WorkerContract.test_a_worker_drops_out_once_its_ttl_has_passed,
            WorkerContract.test_workers_are_listed_by_host_then_pid
        """
        ...


@runtime_checkable
class SupportsCancelPoll(Protocol):
    """A cheap batched read of pending cancel requests, for prompt cancels."""

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """The refs among ``refs`` that are current attempts whose job has a pending
        cancel request (in the order given). Only reads; refs no longer current are
        left out (renewal reports them lost). With flows, a step of a cancelled
        execution has a request (``cancel_execution`` requests it).

        Contract:
            WorkerContract.test_cancel_poll_lists_running_attempts_with_a_request,
            WorkerContract.test_cancel_poll_leaves_out_refs_no_longer_current,
            WorkerContract.test_cancel_poll_sees_a_cancelled_flow_execution
        """
        ...

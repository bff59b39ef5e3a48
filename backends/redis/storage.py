"""Redis storage: one job hash per job, sorted sets as indexes, one Lua script per step.

Every multi-key transition (enqueue, claim, renew, heartbeat, finish, reap, cancel,
retry_dead, purge_dead, prune, a flow's changes) is a single Lua script from ``lua/`` run by
SHA, so a crash between two commands cannot leave a job half-moved, and concurrent callers
serialize on the server. The key layout is documented in ``docs/backends/redis.md``.

:class:`RedisStorage` is composed, not layered: it builds the store (``store.py``: clients,
keys, clock, scripts) and one part per capability on it -- enqueue, claiming, jobs (renew
to reap, reads), admin, limits, workers, and, on first use, flows, schedules and throughput
(:class:`~queue_core.storage.lazy.Lazy`) -- and every operation is one line that delegates
to a part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis
from redis.cluster import RedisCluster
from typing_extensions import Self

from backends.redis.admin import RedisAdmin
from backends.redis.claiming import RedisClaiming
from backends.redis.connect import DEFAULT_PREFIX, clients_from_url
from backends.redis.enqueue import RedisEnqueue
from backends.redis.jobs import RedisJobs
from backends.redis.limits import RedisLimits
from backends.redis.pauses import RedisPauses
from backends.redis.progress import RedisProgress
from backends.redis.roundrobin import RedisRoundRobin
from backends.redis.store import RedisStore
from backends.redis.workers import RedisWorkers
from queue_core.records.control import Pause, PauseKind, Progress, ProgressUpdate
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
    SupportsDebounce,
    SupportsFlows,
    SupportsJobScan,
    SupportsPause,
    SupportsProgress,
    SupportsRateLimits,
    SupportsRoundRobin,
    SupportsSchedules,
    SupportsSupersede,
    SupportsTemplateEnqueue,
    SupportsThroughput,
    SupportsUniqueJobs,
    SupportsWaitClaim,
    SupportsWaitInterrupt,
    SupportsWakeup,
    SupportsWorkerRegistry,
    SupportsWorkflows,
)
from queue_core.storage.lazy import Lazy
from queue_core.storage.protocol import Storage

if TYPE_CHECKING:  # parts built on first use (Lazy): their modules load then
    from backends.redis.flows import RedisFlows
    from backends.redis.schedules import RedisSchedules
    from backends.redis.throughput import RedisThroughput
    from backends.redis.workflows import RedisWorkflows
    from queue_core.records.flows import ExecutionState
    from queue_core.records.workflows import SuspendedEnd
    from queue_core.storage.flows import ExecutionRecord, NewExecution, StepInputs, StepRecord
    from queue_core.storage.workflows import WorkflowState

__all__ = ["DEFAULT_PREFIX", "DEFAULT_RETENTION_MS", "RedisStorage"]


def _flows(storage: RedisStorage) -> RedisFlows:
    from backends.redis.flows import RedisFlows  # with the first flow operation

    return RedisFlows(storage.store)


def _workflows(storage: RedisStorage) -> RedisWorkflows:
    from backends.redis.workflows import RedisWorkflows  # with the first workflow operation

    return RedisWorkflows(storage.store, lambda: storage.flows, storage.jobs)


def _schedules(storage: RedisStorage) -> RedisSchedules:
    from backends.redis.schedules import RedisSchedules

    return RedisSchedules(storage.store)


def _throughput(storage: RedisStorage) -> RedisThroughput:
    from backends.redis.throughput import RedisThroughput

    return RedisThroughput(storage.store)


class RedisStorage(
    Storage,
    SupportsWakeup,
    SupportsWaitClaim,
    SupportsWaitInterrupt,
    SupportsTemplateEnqueue,
    SupportsJobScan,
    SupportsUniqueJobs,
    SupportsRateLimits,
    SupportsWorkflows,  # extends SupportsFlows: listed before it (one MRO)
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
    """Storage on Redis >= 6.2 through redis-py (``redis://``, ``rediss://`` and, for a
    Redis Cluster, ``redis+cluster://`` and ``rediss+cluster://`` URLs).

    Args:
        client: a ``redis.Redis`` or a ``redis.cluster.RedisCluster``, built with
            ``decode_responses=False`` (the default). The storage uses it for every
            operation and closes it in :meth:`close`.
        prefix: the first part of every key (default ``"qc"``). Two storages with
            different prefixes share a server without seeing each other's jobs. On a
            cluster the storage writes the hash tags itself: each queue's plain jobs under
            ``{qc:<queue>}``, what spans queues (limits, flows) under ``{qc}``
            (``backends/redis/homes.py``), so that each Lua script runs in one slot while
            the queues spread over the masters; ``{`` and ``}`` are then refused in the
            prefix.
        retention_ms: how long finished jobs are kept before :meth:`prune` deletes them
            (default 7 days). ``0`` keeps no finished job: the next :meth:`prune`
            deletes every job finished at or before its ``now``. Finished jobs also get a
            ``PEXPIRE`` of retention + 1 day as a backstop.
        wake_client: the client used for blocking waits in :meth:`wait_for_jobs`; it must
            have no socket timeout shorter than the waits (capped at ``WAKE_MAX_S``).

    Supports :class:`~queue_core.storage.abilities.SupportsWakeup` (enqueues and requeues
    push a token to a bounded per-queue list that idle workers ``BLPOP``),
    ``SupportsWaitClaim`` (the ``BLPOP`` and the claim in one round trip,
    ``redis/claiming.py``), ``SupportsWaitInterrupt`` (``CLIENT UNBLOCK`` of the
    wake-up connections, found by their name), ``SupportsTemplateEnqueue``, ``SupportsJobScan``,
    ``SupportsUniqueJobs``, ``SupportsRateLimits``, ``SupportsFlows`` (``redis/flows.py``),
    ``SupportsWorkflows`` (``redis/workflows.py``),
    ``SupportsSchedules``, ``SupportsThroughput``, ``SupportsWorkerRegistry``,
    ``SupportsCancelPoll``, ``SupportsProgress`` (``redis/progress.py``),
    ``SupportsPause`` (``redis/pauses.py``), ``SupportsDebounce`` and ``SupportsSupersede``
    (``enqueue.lua``; executions in ``flow_start.lua``), ``SupportsRoundRobin``
    (``redis/roundrobin.py``), ``SupportsPrefetch``, ``SupportsStartWithFinish`` and
    ``SupportsGiveBack`` (``start.lua``, ``finish.lua``, ``give_back.lua``).
    """

    #: the parts most workers never use, built (and their modules imported) on first use
    flows = Lazy(_flows)
    workflows = Lazy(_workflows)
    schedules = Lazy(_schedules)
    counters = Lazy(_throughput)  # the per-minute throughput counts

    def __init__(
        self,
        client: redis.Redis[bytes] | RedisCluster[bytes],
        *,
        prefix: str = DEFAULT_PREFIX,
        retention_ms: int = DEFAULT_RETENTION_MS,
        wake_client: redis.Redis[bytes] | RedisCluster[bytes] | None = None,
    ) -> None:
        self.store = store = RedisStore(
            client, prefix=prefix, retention_ms=retention_ms, wake_client=wake_client
        )
        self.prefix, self.key_prefix, self.keys = store.prefix, store.key_prefix, store.keys
        self.retention_ms = retention_ms
        self.enqueuing = RedisEnqueue(store)
        self.jobs = RedisJobs(
            store, lambda: self.flows, self._suspended, lambda: RedisStorage.flows.built(self)
        )
        self.claiming = RedisClaiming(
            store, lambda ends: self.jobs.finish(ends, None), self._function_claimed
        )
        self.admin = RedisAdmin(store, self.jobs, self.enqueuing, self._retry_step)
        self.limits = RedisLimits(store)
        self.workers = RedisWorkers(store)
        self.progress = RedisProgress(store)
        self.pauses = RedisPauses(store)
        self.round_robin = RedisRoundRobin(store)

    def _function_claimed(self, execution_id: str, now: int | None) -> None:
        self.workflows.claimed(execution_id, now)

    def _suspended(self, end: SuspendedEnd, now: int | None) -> bool:
        return self.workflows.suspend(end, now)

    def _retry_step(self, dead_id: str, now: int | None) -> str:
        return self.workflows.retry_dead_step(dead_id, now)

    @classmethod
    def from_url(cls, url: str) -> Self:
        """Build from ``redis://[user:password@]host:port/db?prefix=qc&retention=7d``.

        ``rediss://`` uses TLS. ``redis+cluster://host:port/?prefix=qc`` (or
        ``rediss+cluster://``) connects to a Redis Cluster through any one of its nodes
        (redis-py's ``RedisCluster`` discovers the others), or through the first that
        answers of several (``redis+cluster://h1:7000,h2:7001/``); a cluster has only
        database 0.
        ``prefix`` and ``retention`` (read by
        :func:`~queue_core.rules.outcomes.parse_retention`: ``7d``, ``12h``, ``90s``,
        seconds, or ``0``) are this backend's options; every other query parameter goes
        to redis-py (e.g. ``socket_timeout``). Nothing connects here: a cluster's client
        is built at the storage's first call (while its seed node cannot be reached,
        each call is ``StorageUnavailable`` and the next tries again).

        Raises:
            ConfigError: ``invalid_url`` (not one of the four schemes, a bad port, a
                database other than 0 on a cluster, an option redis-py refuses) or
                ``invalid_option`` (a bad prefix or retention).
        """
        c = clients_from_url(url)
        return cls(c.client, prefix=c.prefix, retention_ms=c.retention_ms, wake_client=c.wake)

    def __repr__(self) -> str:
        where = self.store.where()
        return f"RedisStorage({where}, prefix={self.prefix!r}, retention_ms={self.retention_ms})"

    def close(self) -> None:
        """Close both connection pools. Idempotent."""
        self.store.close()

    # ------------------------------------------------------------------ jobs

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """See :meth:`queue_core.storage.protocol.Storage.enqueue`. A batch is all-or-nothing."""
        return self.enqueuing.enqueue(jobs, now)

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """See :meth:`queue_core.storage.abilities.SupportsUniqueJobs.enqueue_unique`."""
        return self.enqueuing.enqueue_unique(jobs, now)

    def enqueue_debounced(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """See :meth:`queue_core.storage.control.SupportsDebounce.enqueue_debounced`."""
        return self.enqueuing.enqueue_debounced(jobs, now)

    def enqueue_superseding(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[Enqueued]:
        """See :meth:`queue_core.storage.control.SupportsSupersede.enqueue_superseding`."""
        return self.enqueuing.enqueue_superseding(jobs, now)

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], *, now: int | None = None
    ) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsTemplateEnqueue.enqueue_template`."""
        self.enqueuing.enqueue_template(template, jobs, now)

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
        return self.claiming.claim(worker_id, queues, limit, lease_ms, now)

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
        return self.claiming.claim(worker_id, queues, limit, lease_ms, now, ahead=True)

    def start_claimed(
        self, refs: Sequence[LeaseRef], ago_ms: Sequence[int] = (), *, now: int | None = None
    ) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsPrefetch.start_claimed`."""
        return self.jobs.start_claimed(refs, ago_ms, now)

    def give_back(self, refs: Sequence[LeaseRef], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsGiveBack.give_back`."""
        return self.jobs.give_back(refs, now)

    def start_and_finish(
        self,
        refs: Sequence[LeaseRef],
        ago_ms: Sequence[int],
        ends: Sequence[AttemptEnd],
        *,
        now: int | None = None,
    ) -> list[bool]:
        """See :meth:`queue_core.storage.abilities.SupportsStartWithFinish.start_and_finish`."""
        return self.jobs.finish(ends, now, (refs, ago_ms))

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """See :meth:`queue_core.storage.abilities.SupportsWakeup.wait_for_jobs`."""
        return self.claiming.wait_for_jobs(queues, timeout)

    def interrupt_waits(self) -> None:
        """See :meth:`queue_core.storage.claims.SupportsWaitInterrupt.interrupt_waits`."""
        self.claiming.interrupt_waits()

    def wait_and_claim(
        self, worker_id: str, queues: Sequence[str], limit: int, lease_ms: int, timeout: float
    ) -> list[ClaimedJob]:
        """See :meth:`queue_core.storage.abilities.SupportsWaitClaim.wait_and_claim`."""
        return self.claiming.wait_and_claim(worker_id, queues, limit, lease_ms, timeout)

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """See :meth:`queue_core.storage.protocol.Storage.renew`."""
        return self.jobs.renew(refs, lease_ms, now)

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.protocol.Storage.heartbeat`."""
        return self.jobs.heartbeat(ref, now)

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """See :meth:`queue_core.storage.protocol.Storage.finish`."""
        return self.jobs.finish(ends, now)

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """See :meth:`queue_core.storage.protocol.Storage.reap`."""
        return self.jobs.reap(now, limit)

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """See :meth:`queue_core.storage.protocol.Storage.cancel`."""
        return self.jobs.cancel(job_id, now)

    def get_job(self, job_id: str) -> JobRecord | None:
        """See :meth:`queue_core.storage.protocol.Storage.get_job`."""
        return self.jobs.get_job(job_id)

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """See :meth:`queue_core.storage.protocol.Storage.list_attempts`."""
        return self.jobs.list_attempts(job_id)

    def cancel_requested(self, refs: Sequence[LeaseRef]) -> list[LeaseRef]:
        """See :meth:`queue_core.storage.abilities.SupportsCancelPoll.cancel_requested`."""
        return self.workers.cancel_requested(refs)

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsRateLimits.rate_usage`."""
        return self.limits.rate_usage(rate_key, window_ms, now)

    def set_progress(
        self, ref: LeaseRef, update: ProgressUpdate, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.control.SupportsProgress.set_progress`."""
        return self.progress.set_progress(ref, update, now)

    def get_progress(self, job_id: str) -> Progress | None:
        """See :meth:`queue_core.storage.control.SupportsProgress.get_progress`."""
        return self.progress.get_progress(job_id)

    def round_robin_keys(self, group: str, *, now: int | None = None) -> list[str]:
        """See :meth:`queue_core.storage.control.SupportsRoundRobin.round_robin_keys`."""
        return self.round_robin.round_robin_keys(group, now)

    def pause(self, kind: PauseKind, name: str, *, now: int | None = None) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.pause`."""
        return self.pauses.pause(kind, name, now)

    def resume(self, kind: PauseKind, name: str) -> bool:
        """See :meth:`queue_core.storage.control.SupportsPause.resume`."""
        return self.pauses.resume(kind, name)

    def list_paused(self) -> list[Pause]:
        """See :meth:`queue_core.storage.control.SupportsPause.list_paused`."""
        return self.pauses.list_paused()

    # ------------------------------------------------------------------ admin

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.count_pending`."""
        return self.admin.count_pending(queues, horizon_ms, now)

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """See :meth:`queue_core.storage.protocol.Storage.stats`."""
        return self.admin.stats(now)

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.prune`."""
        return self.admin.prune(now, limit)

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
        return self.admin.retry_dead(dead_id, queue, now)

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """See :meth:`queue_core.storage.protocol.Storage.purge_dead` (batches of 1,000)."""
        return self.admin.purge_dead(task_name, before)

    def list_jobs(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsJobScan.list_jobs`."""
        return self.admin.list_jobs(state, queue, limit, offset)

    # ------------------------------------------------------------------ workers, throughput

    def register_worker(self, info: WorkerInfo) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.register_worker`."""
        self.workers.register_worker(info)

    def deregister_worker(self, worker_id: str) -> None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.deregister_worker`."""
        self.workers.deregister_worker(worker_id)

    def list_workers(self, *, now: int | None = None) -> list[WorkerInfo]:
        """See :meth:`queue_core.storage.abilities.SupportsWorkerRegistry.list_workers`."""
        return self.workers.list_workers(now)

    def throughput(
        self,
        since_ms: int,
        bucket_ms: int = THROUGHPUT_RESOLUTION_MS,
        *,
        queues: Sequence[str] | None = None,
        now: int | None = None,
    ) -> list[ThroughputCount]:
        """See :meth:`queue_core.storage.abilities.SupportsThroughput.throughput`."""
        return self.counters.throughput(since_ms, bucket_ms, queues, now)

    # ------------------------------------------------------------------ schedules

    def enqueue_tick(
        self, schedule: str, tick_ms: int, job: NewJob, *, now: int | None = None
    ) -> bool:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.enqueue_tick`."""
        return self.schedules.enqueue_tick(schedule, tick_ms, job, now)

    def schedule_ticks(self) -> dict[str, int]:
        """See :meth:`queue_core.storage.abilities.SupportsSchedules.schedule_ticks`."""
        return self.schedules.schedule_ticks()

    # ------------------------------------------------------------------ flows

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.start_execution`."""
        return self.flows.start_execution(new, now)

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.cancel_execution`."""
        return self.flows.cancel_execution(execution_id, now)

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_execution`."""
        return self.flows.get_execution(execution_id)

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_executions`."""
        return self.flows.list_executions(flow, state, limit, offset)

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_steps`."""
        return self.flows.list_steps(execution_id)

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_step_inputs`."""
        return self.flows.get_step_inputs(execution_id, step_id)

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """See :class:`queue_core.storage.abilities.SupportsStepInputsBatch`."""
        return self.flows.get_step_inputs_batch(steps)

    # ------------------------------------------------------------------ workflows

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.workflow_state`."""
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
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.put_memo`."""
        return self.workflows.put_memo(ref, execution_id, key, value, now)

    def send_event(
        self,
        name: str,
        key: str | None = None,
        data: bytes = b"null",
        *,
        now: int | None = None,
    ) -> int:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.send_event`."""
        return self.workflows.send_event(name, key, data, now)

    def start_child_execution(
        self,
        ref: LeaseRef,
        new: NewExecution,
        step_id: str,
        memo_key: str,
        *,
        now: int | None = None,
    ) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.start_child_execution`."""
        return self.workflows.start_child_execution(ref, new, step_id, memo_key, now)

    def resume_execution(
        self, execution_id: str, from_step: str | None = None, *, now: int | None = None
    ) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.resume_execution`."""
        return self.workflows.resume_execution(execution_id, from_step, now)

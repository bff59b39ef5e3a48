"""The ``Storage`` protocol: every operation the core needs, each atomic on its own.

A backend is a class that subclasses :class:`Storage` explicitly (so mypy checks it the
way Rust checks ``impl Storage for X``) and is registered under a URL scheme. All methods
are synchronous; the worker calls them from a thread.

Conventions that hold for every method:

* ``now`` is epoch milliseconds supplied by the caller; ``None`` means the storage reads
  its own clock -- the server's where it has one (PostgreSQL ``now()``, Redis ``TIME``),
  the local clock otherwise. The contract suite passes explicit times and never sleeps.
* Errors are the library's own (:class:`~queue_core.records.errors.StorageError` and
  subclasses; a server that cannot be reached is
  :class:`~queue_core.records.errors.StorageUnavailable`), never a driver's. Credentials never
  appear in messages (:func:`queue_core.storage.urls.mask_url`).
* Payloads and results are opaque ``bytes`` (the core's serializer); times in records
  are epoch milliseconds, converted to aware UTC datetimes only in the public records
  (:func:`queue_core.records.jobs.dt_from_ms`).
* "Atomic" means: a crash at any point leaves the operation either fully applied or not
  applied at all, and two workers calling it at once behave as if one ran after the
  other.
* Batches are lists; a batch of one is the single case. Round trips per job decide
  throughput, so the worker claims, renews and finishes in batches.
* ``peek_*``/``get_*``/``list_*``/``count_*`` only read; ``claim``/``reap``/``finish``
  consume or change.

Storage does no policy math. With each ``NewJob`` the core stores ``max_attempts`` and
``lost_delay_ms`` (the delay to apply if the next attempt is reaped); a ``RETRY``
decision may update ``lost_delay_ms``. So :meth:`Storage.reap` can reschedule or
dead-letter on its own, atomically, and every decision stays the core's.

Finished jobs are kept for a retention period (backend constructor ``retention_ms``,
default 7 days; ``?retention=<duration>`` in URLs where supported) and removed by
:meth:`Storage.prune`, which the worker's reaper calls. Dead-letter entries are kept
until purged. Nothing grows without bound.

Optional abilities beyond this set are separate ``Supports*`` protocols; the core checks
for them with ``isinstance`` and degrades without them. Flows are one of them:
:class:`~queue_core.storage.abilities.SupportsFlows` (defined beside its records in
:mod:`queue_core.storage.flows`, re-exported here and loaded on first use, so a worker with
no flow never builds the flow records).

Building a storage from a URL is part of what a backend provides: the backend *class* is a
:class:`StorageFactory` (it has ``from_url(url) -> Storage``, normally a classmethod), and
that is what the URL registry (:mod:`queue_core.storage.registry`) holds for each scheme.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from queue_core.records.jobs import (
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
    RenewResult,
)

if TYPE_CHECKING:
    pass

__all__ = ["Storage", "StorageFactory"]


@runtime_checkable
class Storage(Protocol):
    """The complete set of storage operations the scheduling core needs (SPEC §8).

    Each method's ``Contract`` section names the cases of the published suite
    (:mod:`queue_core.testing`) that pin its docstring (a test checks the names exist).
    Where a docstring names a function of :mod:`queue_core.rules` or a builder of
    :mod:`queue_core.records.jobs`, call it: the rule is written once there.
    """

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """Store new jobs; return each job's state (``queued`` or ``skipped``), in order.

        Every field of each :class:`~queue_core.records.jobs.NewJob` is stored as given and read
        back by :meth:`get_job` (``enqueued_at = now``, ``attempts = 0``). A job's ready
        time (``JobRecord.run_at``) is ``(run_at if not None else now) + delay_ms``.

        Concurrency ``skip`` jobs (``concurrency_skip=True``) are checked here: when the
        number of ``queued`` + ``running`` jobs with the same ``concurrency_key`` is at
        ``concurrency_limit``, the job is stored ``skipped`` with reason
        ``concurrency_limit`` and ``finished_at = now`` (it stays listable, counts in
        ``stats`` and is pruned like any finished job). Within one batch, earlier jobs
        count against later ones; skipped jobs count against nobody.

        Atomicity: each job is stored whole or not at all; concurrent enqueues of
        ``skip`` jobs never let more than ``concurrency_limit`` become active. A job id
        that already exists (in any state) raises
        :class:`~queue_core.records.errors.StorageError` and stores nothing of that job.

        Contract:
            EnqueueContract, PayloadContract,
            ConcurrencyContract.test_skip_limit_stores_the_extra_job_skipped,
            ConcurrencyContract.test_skip_limit_within_one_batch,
            PruneContract.test_prune_deletes_cancelled_and_skipped_jobs,
            RaceContract.test_skip_limit_holds_under_concurrent_enqueues
        """
        ...

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
        """Claim up to ``limit`` ready jobs from ``queues`` for one attempt each.

        Ready = state ``queued`` and ready time ``<= now``, and not past its
        schedule-to-start bound (:func:`~queue_core.rules.leases.schedule_to_start_expired`
        of the ready time; an expired job is left ``queued`` for :meth:`reap`). Order:
        higher ``priority`` first, then earlier ready time, then enqueue order (a batch
        in its own order), across all the named queues.

        For each claimed job: state becomes ``running``; the attempt counter increases by
        one; a fresh lease token is issued; ``lease_expires_at = now + lease_ms``;
        ``deadline = now + timeout_ms`` when the job has a timeout (else ``None``); the
        heartbeat deadline is ``now + heartbeat_ms`` when it has one; ``started_at =
        now``; a running attempt record (number, worker id, start time, no outcome) is
        stored. The :class:`~queue_core.records.jobs.ClaimedJob` carries the stored fields.

        Concurrency ``queue`` jobs (key set, ``concurrency_skip=False``) are claimed only
        while fewer than ``concurrency_limit`` jobs with that key are running (across
        queues); jobs that cannot be claimed stay ``queued`` in order and do not hold
        back other jobs; a freed slot goes to the key's oldest waiting job.

        Atomicity: each ready job is handed to exactly one caller, however many
        workers claim at once; a concurrency limit is never exceeded.

        Contract:
            ClaimContract, ConcurrencyContract,
            ScheduleToStartContract.test_not_claimable_at_the_deadline,
            RaceContract.test_one_job_is_claimed_by_exactly_one_caller,
            RaceContract.test_many_jobs_are_each_claimed_once
        """
        ...

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """Extend the lease of every current attempt in ``refs`` to ``now + lease_ms``
        (which may shorten it).

        Refs that are no longer current (finished, reaped, superseded, unknown) are
        returned in ``lost`` and left untouched; current ones whose job has a pending
        cancel request are renewed and also listed in ``cancel_requested``
        (:meth:`RenewResult.of <queue_core.records.jobs.RenewResult.of>` builds the result from
        one flag per ref). Renewal does not count as a heartbeat and does not move the
        attempt's ``deadline``.

        Atomicity: per ref; a renewal racing a reap either renews (and the reap skips
        the attempt) or is reported lost.

        Contract:
            LeaseContract, ReapContract.test_timeout_is_not_extended_by_renewal,
            RaceContract.test_renew_racing_reap_either_renews_or_is_lost
        """
        ...

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """Record a heartbeat: the heartbeat deadline becomes ``now + heartbeat_ms``
        (nothing changes for a job without ``heartbeat_ms``).

        Extends nothing else (not the lease). Returns ``True`` when the job has a pending
        cancel request. Raises :class:`~queue_core.records.errors.LeaseLost` when ``ref`` is not
        current.

        Contract:
            LeaseContract, CancelContract.test_cancel_of_a_running_job_only_requests_it,
            ReapContract.test_heartbeat_of_a_reaped_attempt_raises_lease_lost
        """
        ...

    # ------------------------------------------------------------------ attempt end

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """Record attempt ends with the core's decisions; return, per end, whether it took.

        For each end whose ``ref`` is current: the attempt record gets ``outcome``,
        ``reason``, error fields, ``mode`` and ``finished_at = now``; the job's ``error``
        becomes the end's error when it has one; the lease is released (and the
        concurrency slot), and the decision applied. The job's state and job reason are
        :func:`~queue_core.rules.outcomes.end_state` of the decision:

        * ``COMPLETE``: ``succeeded``, ``result`` stored, ``finished_at = now``.
        * ``RETRY``: ``queued``, ready at ``now + delay_ms`` (a schedule-to-start bound
          counts from there); the job's ``lost_delay_ms`` becomes
          ``decision.lost_delay_ms`` when given, else stays.
        * ``DEAD``: ``dead`` with ``decision.reason`` (``fatal`` when it has none),
          ``finished_at = now``; a dead-letter entry is written (its id in
          ``JobRecord.dead_id``) with the payload, the final error, every attempt record
          in order, ``dead_at = now``, and the job's spec as it was enqueued (the
          :class:`~queue_core.records.jobs.NewJob`, attempt-1 ``lost_delay_ms`` included) for
          :meth:`retry_dead`.
        * ``CANCEL``: ``cancelled`` (reason ``cancelled``); ``TIME_OUT``: ``timed_out``
          (reason per ``end_state``); both ``finished_at = now``, no dead letter.

        A decision with ``spends_attempt=False`` also raises the job's ``max_attempts`` by
        one (the attempt spent none of the retry budget: a worker's shutdown, a workflow's
        suspension), in the same atomic step.

        An end whose ``ref`` is not current records nothing and yields ``False``
        (fencing: a reaped attempt cannot overwrite its successor; a second end of one
        attempt is refused).

        Atomicity: per end, all of the above or nothing.

        Contract:
            FinishContract, ConcurrencyContract.test_every_kind_of_end_releases_the_slot,
            RaceContract.test_concurrent_finishes_of_one_attempt_take_once,
            DeadLetterContract.test_retry_dead_replays_the_job_as_it_was_enqueued
        """
        ...

    # ------------------------------------------------------------------ reaper

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """Handle up to ``limit`` attempts and jobs that went silent or overdue; return
        one :class:`~queue_core.records.jobs.ReapedJob` for each.

        * Running attempts whose bound passed, judged by
          :func:`~queue_core.rules.outcomes.reap_verdict`: a passed ``deadline``
          (reason ``timeout``, outcome ``timed_out``) wins over a passed heartbeat
          deadline (``heartbeat_timeout``, ``timed_out``), which wins over an expired
          lease (``lease_expired``, outcome ``lost``). The attempt is recorded with that
          outcome and reason and ``finished_at = now``; the lease and the concurrency
          slot are released. Then: a job with a pending cancel request ends
          ``cancelled`` (reason ``cancelled``, no dead letter); otherwise, if attempts
          remain (``attempt < max_attempts``) the job is queued again, ready at
          :func:`~queue_core.rules.outcomes.reap_ready_at` -- ``now + lost_delay_ms``,
          except that with ``lost_delay_ms == 0`` and no schedule-to-start bound it
          keeps its previous ready time -- and in the place in line it had
          (:func:`~queue_core.rules.outcomes.reap_place_at`): once ready, claims take it
          before the jobs of its priority enqueued after it; else it is
          dead-lettered with reason ``retries_exhausted`` (entry as in :meth:`finish`,
          ``error`` and ``error_class`` ``None``).
          An attempt held ahead of a free slot whose body never started
          (``SupportsPrefetch.claim_ahead``, no ``start_claimed``) spends no attempt:
          its job is queued again whatever its budget, ready with no backoff
          (``reap_ready_at`` with no delay), and its ``max_attempts`` is raised by one
          (its record is kept) -- at most ``MAX_HELD_REFUNDS`` times per job, past
          which a held attempt is reaped as a running one.
        * Queued jobs whose schedule-to-start bound passed
          (:func:`~queue_core.rules.leases.schedule_to_start_expired` of the ready
          time): dead-lettered, reason ``schedule_to_start``, no attempt recorded
          (``ReapedJob.attempt == 0``, ``outcome`` ``None``).

        Atomicity: any number of reapers may run at once; each stale attempt is recorded
        exactly once (exactly one reaper returns it), and a late ``finish``, ``renew``
        or ``heartbeat`` of a reaped attempt is refused.

        Contract:
            ReapContract, ScheduleToStartContract,
            CancelContract.test_reaped_cancel_requested_job_ends_cancelled,
            ConcurrencyContract.test_reap_releases_the_slot,
            RaceContract.test_a_stale_attempt_is_reaped_by_exactly_one_reaper
        """
        ...

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """Delete up to ``limit`` finished jobs (``succeeded``, ``dead``, ``cancelled``,
        ``timed_out``, ``skipped``) and their attempt records whose ``finished_at`` is
        at or before ``now - retention``; they leave ``stats`` and ``count_pending``.
        Queued and running jobs are never pruned; dead-letter entries are kept until
        purged. Returns the number of jobs deleted.

        Retention is the backend's (constructor ``retention_ms``, default 7 days;
        ``?retention=`` read by :func:`~queue_core.rules.outcomes.parse_retention`).

        Contract:
            PruneContract
        """
        ...

    # ------------------------------------------------------------------ control and reads

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """Cancel a job; return its state afterwards.

        A ``queued`` job (ready or delayed) ends ``cancelled`` at once (reason
        ``cancelled``, ``finished_at = now``, no attempt; a ``skip`` slot frees). A
        ``running`` job gets a cancel request (``JobRecord.cancel_requested``, seen by
        ``renew`` / ``heartbeat``) and stays ``running`` until its worker records the
        end or :meth:`reap` ends it. A finished job is left as it is. Raises
        :class:`~queue_core.records.errors.NotFound` for an unknown id.

        Contract:
            CancelContract, ConcurrencyContract.test_skip_slot_frees_when_a_queued_job_is_cancelled
        """
        ...

    def get_job(self, job_id: str) -> JobRecord | None:
        """Read one job, or ``None``.

        Contract:
            EnqueueContract.test_enqueue_stores_every_field,
            EnqueueContract.test_get_job_of_unknown_id_is_none
        """
        ...

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """Read a job's attempt records, oldest first (empty for an unknown id).

        Contract:
            EnqueueContract.test_list_attempts_of_new_and_unknown_jobs_is_empty,
            FinishContract.test_retry_records_the_failed_attempt
        """
        ...

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """Count jobs in ``queues`` that are running, or queued and ready by
        ``now + horizon_ms``. Used by burst workers to decide that they are done.

        Contract:
            StatsContract.test_count_pending_counts_running_and_soon_ready_jobs
        """
        ...

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """Per-queue counts, sorted by queue name; a queue with no job left is not listed.
        ``ready`` / ``scheduled`` split the queued jobs by ready time ``<= now``.

        Contract:
            StatsContract
        """
        ...

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """A page of dead-letter entries, newest first, optionally of one task.

        Entries are built by :meth:`DeadJob.build <queue_core.records.jobs.DeadJob.build>`
        (which decodes JSON payloads into ``args`` / ``kwargs``).

        Contract:
            DeadLetterContract.test_list_dead_is_newest_first,
            DeadLetterContract.test_list_dead_pages_with_offset_and_limit,
            DeadLetterContract.test_list_dead_filters_by_task_name
        """
        ...

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """One dead-letter entry, or ``None``; equal to the entry :meth:`list_dead` lists.

        Contract:
            DeadLetterContract.test_get_dead_equals_the_listed_entry,
            DeadLetterContract.test_dead_entry_decodes_args_and_reads_like_a_mapping
        """
        ...

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """Replay a dead job: remove the entry and enqueue the job
        :func:`~queue_core.rules.outcomes.replay_job` builds from the spec the entry
        kept: a new id (:func:`~queue_core.storage.job_ids.new_job_id`: time-ordered, as
        every job id), a fresh attempt budget, the enqueue-time task, payload, priority,
        options, ``max_attempts``, ``lost_delay_ms``, timeouts, schedule-to-start and
        concurrency, with one more replay counted in ``options`` (``"replays"``);
        ``queue`` overrides the queue; ready at ``now``; ``replay_of = dead_id``.
        Returns the new job id. ``replay_job`` refuses a flow step's entry
        (:class:`~queue_core.records.errors.ConfigError`): call it before changing anything.

        Atomicity: entry removal and new job happen together; two concurrent retries of
        one entry yield one new job and one :class:`~queue_core.records.errors.NotFound`.

        Contract:
            DeadLetterContract.test_retry_dead_replays_the_job_as_it_was_enqueued,
            DeadLetterContract.test_retry_dead_counts_the_replays_of_a_chain_in_the_options,
            RaceContract.test_retry_dead_races_yield_one_new_job
        """
        ...

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """Delete dead-letter entries (of one task; dead at or before ``before`` epoch ms
        when given). Returns the number removed.

        Contract:
            DeadLetterContract.test_purge_dead_by_task_name,
            DeadLetterContract.test_purge_dead_before_is_inclusive
        """
        ...

    def close(self) -> None:
        """Release connections. Idempotent; succeeds when the server is down.

        Contract:
            PayloadContract.test_close_is_idempotent,
            OutageContract.test_close_of_a_storage_whose_server_is_down_succeeds
        """
        ...


class StorageFactory(Protocol):
    """What a backend class provides besides the operations: building itself from a URL.

    A class satisfies it with a classmethod, so ``MyStorage`` itself (the class object,
    not an instance) is the factory; this is what the URL registry resolves a scheme to.
    Declare the conformance once in your backend's module so mypy checks the signature::

        class MyStorage(Storage):
            @classmethod
            def from_url(cls, url: str) -> Self: ...

        _factory: StorageFactory = MyStorage   # mypy: from_url exists and fits

    The in-repo backends are checked the same way (``backends/_conformance.py``).
    """

    def from_url(self, url: str) -> Storage:
        """Build a ready storage from ``url`` (its scheme already chosen this backend).

        The backend parses everything else in the URL itself (host, database, query
        options such as ``?retention=7d``). A URL it cannot use raises
        :class:`~queue_core.records.errors.ConfigError` (code ``invalid_url``, or e.g.
        ``invalid_duration`` for a bad duration option) naming the bad part, with the
        password masked (:func:`queue_core.storage.urls.mask_url`). A server that cannot be
        reached is not an error here: the storage builds, and each call made while the
        server stays down raises :class:`~queue_core.records.errors.StorageUnavailable`,
        so that a worker started during an outage waits for the server.

        Contract:
            OutageContract
        """
        ...

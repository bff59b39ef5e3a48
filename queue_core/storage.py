"""The ``Storage`` protocol: every operation the core needs, each atomic on its own.

A backend is a class that subclasses :class:`Storage` explicitly (so mypy checks it the
way Rust checks ``impl Storage for X``) and is registered under a URL scheme. All methods
are synchronous; the worker calls them from a thread.

Conventions that hold for every method:

* ``now`` is epoch milliseconds supplied by the caller; ``None`` means the storage reads
  its own clock -- the server's where it has one (PostgreSQL ``now()``, Redis ``TIME``),
  the local clock otherwise. The contract suite passes explicit times and never sleeps.
* Errors are the library's own (:class:`~queue_core.errors.StorageError` and
  subclasses; a server that cannot be reached is
  :class:`~queue_core.errors.StorageUnavailable`), never a driver's. Credentials never
  appear in messages (:func:`queue_core.urls.mask_url`).
* Payloads and results are opaque ``bytes`` (the core's serializer); times in records
  are epoch milliseconds, converted to aware UTC datetimes only in the public records
  (:func:`queue_core.model.dt_from_ms`).
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
:class:`~queue_core.flows.storage.SupportsFlows` (defined beside its records in
:mod:`queue_core.flows.storage`, re-exported here and loaded on first use, so a worker with
no flow never builds the flow records).

Building a storage from a URL is part of what a backend provides: the backend *class* is a
:class:`StorageFactory` (it has ``from_url(url) -> Storage``, normally a classmethod), and
that is what the URL registry (:mod:`queue_core.registry`) holds for each scheme.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from queue_core.model import (
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

if TYPE_CHECKING:
    from queue_core.flows.storage import SupportsFlows

__all__ = [
    "Storage",
    "StorageFactory",
    "SupportsFlows",
    "SupportsJobScan",
    "SupportsMigrate",
    "SupportsSchemaVersion",
    "SupportsRateLimits",
    "SupportsTemplateEnqueue",
    "SupportsUniqueJobs",
    "SupportsWaitClaim",
    "SupportsWakeup",
]


@runtime_checkable
class Storage(Protocol):
    """The complete set of storage operations the scheduling core needs (SPEC §8)."""

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[JobState]:
        """Store new jobs; return each job's state (``queued`` or ``skipped``), in order.

        A job's ready time is ``(run_at if not None else now) + delay_ms``.

        Concurrency ``skip`` jobs (``concurrency_skip=True``) are checked here: when the
        number of ``queued`` + ``running`` jobs with the same ``concurrency_key`` is at
        ``concurrency_limit``, the job is stored ``skipped`` with reason
        ``concurrency_limit`` (it stays listable). Within one batch, earlier jobs count
        against later ones.

        Atomicity: each job is stored whole or not at all; concurrent enqueues of
        ``skip`` jobs never let more than ``concurrency_limit`` become active. A job id
        that already exists raises :class:`~queue_core.errors.StorageError` and stores
        nothing of that job.
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

        Ready = state ``queued`` and ready time ``<= now``, and (when it has
        ``schedule_to_start_ms``) not past its schedule-to-start deadline (expired jobs
        are left for :meth:`reap`). Order: higher ``priority`` first, then earlier ready
        time, then enqueue order, across all the named queues.

        For each claimed job: state becomes ``running``; the attempt counter increases by
        one; a fresh lease token is issued; ``lease_expires_at = now + lease_ms``;
        ``deadline = now + timeout_ms`` when the job has a timeout; the heartbeat
        deadline is ``now + heartbeat_ms`` when it has one; a running attempt record
        (number, worker id, start time) is stored.

        Concurrency ``queue`` jobs (key set, ``concurrency_skip=False``) are claimed only
        while fewer than ``concurrency_limit`` jobs with that key are running; jobs that
        cannot be claimed stay ``queued`` in order.

        Atomicity: each ready job is handed to exactly one caller, however many
        workers claim at once; a concurrency limit is never exceeded.
        """
        ...

    def renew(
        self, refs: Sequence[LeaseRef], lease_ms: int, *, now: int | None = None
    ) -> RenewResult:
        """Extend the lease of every current attempt in ``refs`` to ``now + lease_ms``.

        Refs that are no longer current (finished, reaped, superseded) are returned in
        ``lost`` and left untouched; current ones whose job has a pending cancel request
        are renewed and also listed in ``cancel_requested``. Renewal does not count as a
        heartbeat.

        Atomicity: per ref; a renewal racing a reap either renews (and the reap skips
        the attempt) or is reported lost.
        """
        ...

    def heartbeat(self, ref: LeaseRef, *, now: int | None = None) -> bool:
        """Record a heartbeat: the heartbeat deadline becomes ``now + heartbeat_ms``.

        Also extends nothing else. Returns ``True`` when the job has a pending cancel
        request. Raises :class:`~queue_core.errors.LeaseLost` when ``ref`` is not current.
        """
        ...

    # ------------------------------------------------------------------ attempt end

    def finish(self, ends: Sequence[AttemptEnd], *, now: int | None = None) -> list[bool]:
        """Record attempt ends with the core's decisions; return, per end, whether it took.

        For each end whose ``ref`` is current: the attempt record gets ``outcome``,
        ``reason``, error fields, ``mode`` and ``finished_at = now``; the job's lease is
        released (and its concurrency slot), and the decision applied:

        * ``COMPLETE``: state ``succeeded``, ``result`` stored, ``finished_at = now``.
        * ``RETRY``: state ``queued``, ready at ``now + delay_ms``; the job's
          ``lost_delay_ms`` becomes ``decision.lost_delay_ms`` when given.
        * ``DEAD``: state ``dead`` with ``decision.reason``; a dead-letter entry is
          written with the payload, the final error and every attempt record.
        * ``CANCEL`` / ``TIME_OUT``: state ``cancelled`` / ``timed_out``.

        An end whose ``ref`` is not current records nothing and yields ``False``
        (fencing: a reaped attempt cannot overwrite its successor).

        Atomicity: per end, all of the above or nothing.
        """
        ...

    # ------------------------------------------------------------------ reaper

    def reap(self, *, now: int | None = None, limit: int = 100) -> list[ReapedJob]:
        """Handle up to ``limit`` attempts and jobs that went silent or overdue.

        * Running attempts whose lease expired (reason ``lease_expired``, outcome
          ``lost``), whose ``deadline`` passed (``timeout``, outcome ``timed_out``) or
          whose heartbeat deadline passed (``heartbeat_timeout``, outcome
          ``timed_out``). The attempt is recorded with that outcome; a job with a
          pending cancel request ends ``cancelled``; otherwise, if attempts remain
          (``attempt < max_attempts``) the job is queued again, ready at
          ``now + lost_delay_ms``, else it is dead-lettered with reason
          ``retries_exhausted``. The concurrency slot is released.
        * Queued jobs whose schedule-to-start deadline (ready time +
          ``schedule_to_start_ms``) passed: dead-lettered, reason
          ``schedule_to_start``, no attempt recorded.

        Atomicity: any number of reapers may run at once; each stale attempt is recorded
        exactly once (exactly one reaper returns it).
        """
        ...

    def prune(self, *, now: int | None = None, limit: int = 1000) -> int:
        """Delete up to ``limit`` finished jobs (and their attempt records) whose
        ``finished_at`` is at or before ``now - retention``. Dead-letter entries are kept
        until purged. Returns the number of jobs deleted."""
        ...

    # ------------------------------------------------------------------ control and reads

    def cancel(self, job_id: str, *, now: int | None = None) -> JobState:
        """Cancel a job; return its state afterwards.

        A ``queued`` job ends ``cancelled`` at once. A ``running`` job gets a cancel
        request (seen by ``renew`` / ``heartbeat``) and stays ``running`` until its
        worker records the end. A finished job is left as it is. Raises
        :class:`~queue_core.errors.NotFound` for an unknown id.
        """
        ...

    def get_job(self, job_id: str) -> JobRecord | None:
        """Read one job, or ``None``."""
        ...

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        """Read a job's attempt records, oldest first (empty for an unknown id)."""
        ...

    def count_pending(
        self, queues: Sequence[str], horizon_ms: int, *, now: int | None = None
    ) -> int:
        """Count jobs in ``queues`` that are running, or queued and ready by
        ``now + horizon_ms``. Used by burst workers to decide that they are done."""
        ...

    def stats(self, *, now: int | None = None) -> list[QueueStats]:
        """Per-queue counts, sorted by queue name."""
        ...

    # ------------------------------------------------------------------ dead letters

    def list_dead(
        self, limit: int = 20, offset: int = 0, task_name: str | None = None
    ) -> list[DeadJob]:
        """A page of dead-letter entries, newest first, optionally of one task."""
        ...

    def get_dead(self, dead_id: str) -> DeadJob | None:
        """One dead-letter entry, or ``None``."""
        ...

    def retry_dead(self, dead_id: str, queue: str | None = None, *, now: int | None = None) -> str:
        """Replay a dead job: remove the entry, enqueue a new job with a fresh attempt
        budget (same task, payload, options, priority; ``queue`` overrides the queue),
        ``replay_of = dead_id``, ready now. Returns the new job id.

        Atomicity: entry removal and new job happen together; two concurrent retries of
        one entry yield one new job and one :class:`~queue_core.errors.NotFound`.
        """
        ...

    def purge_dead(self, task_name: str | None = None, before: int | None = None) -> int:
        """Delete dead-letter entries (of one task; dead at or before ``before`` epoch ms
        when given). Returns the number removed."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
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
        :class:`~queue_core.errors.ConfigError` (code ``invalid_url``, or e.g.
        ``invalid_duration`` for a bad duration option) naming the bad part, with the
        password masked (:func:`queue_core.urls.mask_url`). Connecting lazily is allowed:
        a server that cannot be reached may be reported on first use as
        :class:`~queue_core.errors.StorageUnavailable`.
        """
        ...


@runtime_checkable
class SupportsWakeup(Protocol):
    """Push wake-ups: an idle worker blocks until a job may be ready instead of polling."""

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block up to ``timeout`` seconds until a job may have become ready in one of
        ``queues``; ``True`` if woken, ``False`` on timeout. Spurious wake-ups are allowed."""
        ...


@runtime_checkable
class SupportsWaitClaim(Protocol):
    """Wake-up and claim in one step, for an idle worker (fewer round trips than
    :meth:`~SupportsWakeup.wait_for_jobs` followed by :meth:`~Storage.claim`)."""

    def wait_and_claim(
        self, worker_id: str, queues: Sequence[str], limit: int, lease_ms: int, timeout: float
    ) -> list[ClaimedJob]:
        """Block up to ``timeout`` seconds until a job may be ready in one of ``queues``
        (as ``wait_for_jobs``; at once when one is ready now), then claim up to ``limit``
        of them at the storage's time (as ``claim``). A timeout or a spurious wake-up
        claims what is ready then, often nothing: ``[]``."""
        ...


@runtime_checkable
class SupportsTemplateEnqueue(Protocol):
    """A batch of jobs that differ only in id, payload and lost delay (``Task.map``'s)
    stored without a :class:`~queue_core.model.NewJob` per job."""

    def enqueue_template(
        self, template: NewJob, jobs: Sequence[tuple[str, bytes, int]], *, now: int | None = None
    ) -> None:
        """Store one job per ``(id, payload, lost_delay_ms)`` of ``jobs``: ``template``
        with those three fields replaced (the other fields of ``template``, its id
        included, are ignored). Exactly what :meth:`Storage.enqueue` of those jobs
        (:func:`queue_core.jobbuild.expand_template`) at ``now`` stores: the same rows,
        indexes, counts and wake-ups; all-or-nothing (a repeated or existing id stores
        nothing and raises ``StorageError``)."""
        ...


@runtime_checkable
class SupportsMigrate(Protocol):
    """Explicit schema management (``queue-core migrate``)."""

    def migrate(self) -> None:
        """Create or upgrade the schema. Idempotent; safe to run concurrently."""
        ...


@runtime_checkable
class SupportsSchemaVersion(Protocol):
    """A storage whose schema can be absent: read-only tools check before reading."""

    def schema_version(self) -> int:
        """The stored schema version; ``0`` when the storage holds no queue-core schema.
        Never creates the schema."""
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
        """A page of jobs, newest first, optionally filtered."""
        ...


@runtime_checkable
class SupportsUniqueJobs(Protocol):
    """Unique jobs (SPEC §11): enqueue that reports which job each new job became.

    :meth:`Storage.enqueue` of a storage with this ability honours
    :attr:`~queue_core.model.NewJob.unique_key` the same way (it only cannot say which
    job holds the key); the core calls :meth:`enqueue_unique` for jobs with a key.
    """

    def enqueue_unique(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[Enqueued]:
        """:meth:`Storage.enqueue`, plus unique keys, returning one :class:`Enqueued` per job.

        A job with ``unique_key`` whose key is held at ``now`` by another job (decided by
        :func:`queue_core.policy.limits.unique_holds` from that job's state, enqueue time
        and ``unique_for_ms``) stores nothing and yields ``Enqueued(holder_id,
        holder_state, existing=True)``; otherwise it is stored and becomes the key's
        holder. Within one batch an earlier job holds its key against later ones.

        Atomicity: the holder lookup and the store are one atomic step, so any number of
        concurrent enqueues with one key store exactly one job while it holds the key.
        """
        ...


@runtime_checkable
class SupportsRateLimits(Protocol):
    """Per-task rate limits (SPEC §11): :meth:`Storage.claim` honours ``rate_key``.

    A job with :attr:`~queue_core.model.NewJob.rate_key` is claimed only when
    :func:`queue_core.policy.limits.rate_grant` allows it at the claim's ``now`` given the
    key's recent claim times, which the storage keeps and updates in the same atomic step
    as the claim (so the limit holds across all workers); a job not allowed stays
    ``queued``. Jobs without a key are claimed exactly as before.
    """

    def rate_usage(self, rate_key: str, window_ms: int, *, now: int | None = None) -> int:
        """How many claims of ``rate_key`` started in the window ``(now - window_ms, now]``."""
        ...


if not TYPE_CHECKING:  # PEP 562: mypy sees the import above

    def __getattr__(name: str) -> Any:
        if name == "SupportsFlows":
            from queue_core.flows.storage import SupportsFlows

            globals()[name] = SupportsFlows
            return SupportsFlows
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Records that cross the :class:`~queue_core.storage.protocol.Storage` protocol, and the
public ones.

Times inside the protocol are integers: epoch milliseconds (``*_ms`` / ``now``). Public
records (:class:`AttemptRecord`, :class:`DeadJob`, :class:`JobInfo`) carry timezone-aware
UTC :class:`~datetime.datetime` values; :func:`dt_from_ms` converts.

Payloads and results cross the protocol as ``bytes`` produced by the core's serializer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from queue_core.records.base import Record, _MappingMixin
from queue_core.records.control import ProgressUpdate

__all__ = [
    "Action",
    "AttemptEnd",
    "AttemptRecord",
    "ClaimedJob",
    "DeadJob",
    "Decision",
    "Enqueued",
    "ErrorInfo",
    "JobInfo",
    "JobRecord",
    "JobState",
    "LeaseRef",
    "NewJob",
    "Outcome",
    "QueueStats",
    "Reason",
    "ReapedJob",
    "RenewResult",
    "dt_from_ms",
    "ms_from_dt",
]


class JobState(str, Enum):
    """The state of a job (SPEC §5)."""

    QUEUED = "queued"
    """Waiting, possibly until ``run_at``."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    """Dead-lettered: out of attempts or failed fatally."""
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    """Not run: a ``skip`` concurrency limit was reached at enqueue."""
    TIMED_OUT = "timed_out"
    """Ended by its flow's deadline (flows only)."""

    @property
    def finished(self) -> bool:
        return self not in (JobState.QUEUED, JobState.RUNNING)

    def __str__(self) -> str:
        return self.value


class Outcome(str, Enum):
    """How one attempt ended (SPEC §5)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LOST = "lost"
    CANCELLED = "cancelled"
    SUSPENDED = "suspended"
    """A workflow's function stopped to sleep or wait (SPEC §12): the attempt spends none
    of the job's retry budget, and the job runs again when its wait is over."""

    def __str__(self) -> str:
        return self.value


class Reason(str, Enum):
    """Why an attempt or a job ended as it did. Timeout kinds are members, not strings."""

    # attempt reasons
    ERROR = "error"
    """The body raised a retryable error."""
    TIMEOUT = "timeout"
    """The attempt ran past its ``timeout``."""
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"
    """The body did not call ``ctx.heartbeat()`` within ``heartbeat``."""
    LEASE_EXPIRED = "lease_expired"
    """The worker stopped renewing the lease (died, hung or lost its storage)."""
    WORKER_SHUTDOWN = "worker_shutdown"
    """The worker shut down and released the attempt for retry."""
    PROCESS_DIED = "process_died"
    """An isolated child process died (signal or exit code) during the attempt."""
    # job reasons (dead letters, skips, cancels)
    RETRIES_EXHAUSTED = "retries_exhausted"
    FATAL = "fatal"
    SCHEDULE_TO_START = "schedule_to_start"
    UNKNOWN_TASK = "unknown_task"
    BAD_PAYLOAD = "bad_payload"
    CORRUPT_RECORD = "corrupt_record"
    """The job's stored record could not be read (a field corrupted in storage): the job is
    dead-lettered alone with what could be read (``queue_core.records.corrupt``)."""
    CONCURRENCY_LIMIT = "concurrency_limit"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    """A newer job with the same key took its place (``cancel_in_progress``: the job and
    its attempt end ``cancelled``; ``latest``: the queued job ends ``skipped``)."""
    START_LATE = "start_late"
    """A rate-limited job whose body could not start by its ``start_by`` was given back
    (``lost``, no attempt spent): starting it later could break the rate."""
    # flows (SPEC §7)
    FLOW_TIMEOUT = "flow_timeout"
    """The attempt (or execution) was ended by its flow's deadline; not retried."""
    STEP_FAILED = "step_failed"
    """An execution failed because one of its steps ended dead."""
    NOT_RUN = "not_run"
    """A step job whose execution ended before it could run (or run again): the job
    ends ``cancelled`` with this reason and is never claimed."""
    EXIT_CODE = "exit_code"
    """A ``type: script`` step exited with a non-zero code (the code is in the message)."""
    HTTP_STATUS = "http_status"
    """A ``type: http`` step's response had a status outside its ``expect`` (the status is
    in the message)."""
    # workflows (SPEC §12): why an attempt was suspended
    SLEEP = "sleep"
    EVENT = "event"
    """``ctx.wait_for_event``; ``sleep``: ``ctx.sleep``; ``children``: ``ctx.run`` & co."""
    CHILDREN = "children"
    TEMPLATE_ERROR = "template_error"
    """A template of a flow-file step's field (``{{ input.x }}``, ``{{ secrets.NAME }}``, …)
    could not be rendered for this attempt."""
    NOT_ALLOWED = "not_allowed"
    """The worker's operator has not allowed this step here (a script outside the worker's
    ``flow_dirs``, an http step to a host not in its ``http_hosts``): refused, not run, and
    not retried (the job is dead-lettered ``fatal``)."""

    def __str__(self) -> str:
        return self.value


class Action(str, Enum):
    """What the core decided after an attempt ended."""

    COMPLETE = "complete"
    """The job succeeded: state ``succeeded``, result stored."""
    RETRY = "retry"
    """Queue the job again ``delay_ms`` after the storage's ``now``."""
    DEAD = "dead"
    """Dead-letter the job with ``reason``."""
    CANCEL = "cancel"
    """The job ends ``cancelled`` (not retried, not dead-lettered)."""
    TIME_OUT = "time_out"
    """The job ends ``timed_out`` (its flow's deadline passed)."""


def dt_from_ms(ms: int | None) -> datetime | None:
    """Epoch milliseconds to an aware UTC datetime (``None`` stays ``None``); a time past
    what ``datetime`` holds (a corrupt stored value) is shown as its last (or first) day,
    so a record with one bad time still reads."""
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return (datetime.max if ms > 0 else datetime.min).replace(tzinfo=timezone.utc)


def ms_from_dt(dt: datetime) -> int:
    """An aware (or UTC-naive) datetime to epoch milliseconds."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(round(dt.timestamp() * 1000))


# --------------------------------------------------------------------------- protocol records


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class NewJob(Record):
    """A job to enqueue. The core fills every field; the storage stores them verbatim.

    The core precomputes what the storage must do on its own when an attempt is lost or
    overdue (``max_attempts``, ``lost_delay_ms``), so reaping needs no policy math in
    storage and every decision stays the core's.
    """

    id: str
    """Job id, chosen by the core (unique; any string: the core makes time-ordered
    version-7 UUIDs as 32 hex digits, :func:`queue_core.app.job_ids.new_job_id`)."""
    task_name: str
    queue: str
    payload: bytes
    priority: int = 0
    """Higher runs first within a queue."""
    run_at: int | None = None
    """Epoch ms at which the job becomes ready; ``None`` = the storage's ``now``."""
    delay_ms: int = 0
    """Added to ``run_at`` (or to the storage's ``now`` when ``run_at`` is ``None``)."""
    max_attempts: int = 1
    """Attempts including the first; a reaped attempt with no attempts left dead-letters."""
    lost_delay_ms: int = 0
    """Delay before the retry when the storage reaps the next attempt (lost or overdue)."""
    timeout_ms: int | None = None
    """Bound on one attempt; the storage reaps an attempt still running after it."""
    heartbeat_ms: int | None = None
    """Max silence between heartbeats; ``None`` = heartbeats are not required."""
    schedule_to_start_ms: int | None = None
    """Max wait between ready and claimed; past it the job is dead-lettered unrun."""
    concurrency_key: str | None = None
    """Jobs sharing a key share ``concurrency_limit`` across all workers."""
    concurrency_limit: int | None = None
    concurrency_skip: bool = False
    """``True``: ``skip`` behaviour (active = queued + running, checked at enqueue);
    ``False``: ``queue`` behaviour (active = running, checked at claim)."""
    options: str | None = None
    """Core-owned JSON text (per-call overrides); stored and returned verbatim."""
    replay_of: str | None = None
    """Dead-letter id this job replays, if any."""
    execution_id: str | None = None
    """Flows: the execution this job is a step of (``None`` for ordinary jobs)."""
    step_id: str | None = None
    """Flows: the step this job runs."""
    flow_deadline_at: int | None = None
    """Flows: epoch ms of the execution's deadline, set by storage when it releases the
    step (copied from the execution's ``deadline_at``)."""
    unique_key: str | None = None
    """Unique jobs: while a job with this key holds it (see
    :func:`queue_core.rules.limits.unique_holds`), enqueueing another stores nothing and
    yields the holder's id
    (:meth:`~queue_core.storage.abilities.SupportsUniqueJobs.enqueue_unique`)."""
    unique_for_ms: int | None = None
    """Unique jobs: the key stays held this long after the job's enqueue, whatever its
    state; ``None`` = only while ``queued`` or ``running``."""
    rate_key: str | None = None
    """Rate limits: jobs sharing a key share ``rate_limit`` claims per ``rate_window_ms``
    across all workers (:mod:`queue_core.rules.limits`); ``None`` = not rate limited."""
    rate_limit: int | None = None
    rate_window_ms: int | None = None
    concurrency_behavior: str | None = None
    """SPEC §13: ``round_robin``, ``cancel_in_progress`` or ``latest`` (each applied by
    storage with its ability, :mod:`queue_core.storage.control`); ``None``: the §7
    behaviour ``concurrency_skip`` names."""
    concurrency_group: str | None = None
    """``round_robin``: the group whose keys claims rotate over (the task's or flow's name)."""
    debounce_key: str | None = None
    """Debounce: a later enqueue with this key merges into this job while it is queued
    (:meth:`~queue_core.storage.control.SupportsDebounce.enqueue_debounced`)."""
    debounce_ms: int | None = None
    debounce_max_ms: int | None = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Enqueued(Record):
    """What one job of
    :meth:`~queue_core.storage.abilities.SupportsUniqueJobs.enqueue_unique` became.

    ``existing=False``: the job was stored (``state`` is ``queued`` or ``skipped``).
    ``existing=True``: its unique key was held (or, debounced, it was merged into the
    queued holder); nothing was stored and ``job_id`` is the holder's id, ``state`` the
    holder's state. ``superseded``: the jobs a ``cancel_in_progress`` / ``latest`` job
    ended by arriving (``cancelled`` / ``skipped``, reason ``superseded``).
    """

    job_id: str
    state: JobState
    existing: bool = False
    superseded: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class LeaseRef(Record):
    """Names one attempt for fencing: refused with :class:`LeaseLost` once not current."""

    job_id: str
    attempt: int
    lease_token: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ClaimedJob(Record):
    """A job handed to a worker for one attempt."""

    id: str
    task_name: str
    queue: str
    payload: bytes
    attempt: int
    """1-based number of this attempt."""
    lease_token: str
    lease_expires_at: int
    """Epoch ms, by the storage's clock."""
    deadline: int | None
    """Epoch ms at which this attempt times out (``timeout``), by the storage's clock."""
    max_attempts: int
    priority: int = 0
    timeout_ms: int | None = None
    heartbeat_ms: int | None = None
    options: str | None = None
    enqueued_at: int = 0
    replay_of: str | None = None
    started_at: int = 0
    """Epoch ms the storage recorded as this attempt's start."""
    execution_id: str | None = None
    """Flows: the execution this job is a step of (``None`` for ordinary jobs)."""
    step_id: str | None = None
    flow_deadline_at: int | None = None
    """Flows: the execution's deadline. ``deadline`` is then the earlier of the attempt's
    own deadline and this one; the worker ends an attempt stopped by this one
    ``timed_out`` / ``flow_timeout`` (decision ``TIME_OUT``), never retried."""
    run_at: int | None = None
    """Epoch ms at which this attempt became due, when the storage reports it (memory,
    SQLite, PostgreSQL, SQS); ``None`` otherwise. Only for figures (pick-up latency)."""
    start_by: int | None = None
    """Rate-limited jobs: the body must start by this epoch ms (storage clock), the time
    the rate key's window counts it at (:func:`queue_core.rules.limits.rate_grant`); a
    worker that cannot gives the job back (:func:`~queue_core.rules.limits.start_late`)."""

    @property
    def ref(self) -> LeaseRef:
        return LeaseRef(self.id, self.attempt, self.lease_token)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ErrorInfo(Record):
    """The error an attempt ended with, as recorded."""

    error_class: str
    """Simple class name, e.g. ``ValueError``."""
    error_type: str
    """Fully qualified name, e.g. ``builtins.ValueError``."""
    message: str
    traceback: str | None = None
    """Size-capped formatted traceback."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Decision(Record):
    """The core's decision after an attempt; the storage applies it atomically."""

    action: Action
    delay_ms: int = 0
    """``RETRY``: wait this long after the storage's ``now``."""
    reason: str | None = None
    """``DEAD``: the dead-letter reason (``retries_exhausted``, ``fatal``, …)."""
    lost_delay_ms: int | None = None
    """``RETRY``: the delay to apply if the *next* attempt is reaped (see NewJob)."""
    spends_attempt: bool = True
    """``False``: the attempt that ended does not count against the job's retry budget
    (an attempt released at worker shutdown, SPEC §4). Storage raises the job's
    ``max_attempts`` by one in the same atomic ``finish``; attempt numbers keep counting,
    so ``reap`` and every later decision see the extra attempt."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class AttemptEnd(Record):
    """One attempt's end and the core's decision, recorded by ``Storage.finish``."""

    ref: LeaseRef
    outcome: Outcome
    decision: Decision
    reason: str | None = None
    """Attempt reason (:class:`Reason` value) or ``None`` for success."""
    result: bytes | None = None
    """Serialized return value (``COMPLETE`` only)."""
    error: ErrorInfo | None = None
    mode: str = "thread"
    """How the attempt ran: ``async``, ``thread`` or ``process``."""
    progress: ProgressUpdate | None = None
    """The body's latest ``ctx.progress`` report, stored with the end (flushed) by a
    storage with ``SupportsProgress``; others ignore it."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RenewResult(Record):
    """What a lease renewal found."""

    lost: list[LeaseRef] = field(default_factory=list)
    """Attempts that are no longer current (reaped, finished, superseded)."""
    cancel_requested: list[LeaseRef] = field(default_factory=list)
    """Attempts still current whose job was asked to cancel."""

    @classmethod
    def of(cls, refs: Sequence[LeaseRef], flags: Iterable[bool | None]) -> RenewResult:
        """The result for ``refs`` from one flag per ref, in order: ``None`` when the
        attempt is no longer current (lost), else whether its job was asked to cancel."""
        result = cls()
        for ref, flag in zip(refs, flags, strict=True):
            if flag is None:
                result.lost.append(ref)
            elif flag:
                result.cancel_requested.append(ref)
        return result


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ReapedJob(Record):
    """One attempt or queued job handled by ``Storage.reap``."""

    job_id: str
    attempt: int
    """Number of the attempt that was reaped; 0 when no attempt ran (schedule-to-start)."""
    outcome: Outcome | None
    """``lost`` / ``timed_out`` / ``cancelled``; ``None`` for schedule-to-start."""
    reason: str
    """``lease_expired``, ``timeout``, ``heartbeat_timeout``, ``schedule_to_start``,
    ``cancelled``."""
    state: JobState
    """The job's state after the reap (``queued`` to retry, ``dead``, ``cancelled``)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class QueueStats(Record):
    """Job counts of one queue at one moment."""

    queue: str
    ready: int = 0
    """Queued and due now."""
    scheduled: int = 0
    """Queued with ``run_at`` in the future."""
    running: int = 0
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0
    skipped: int = 0
    timed_out: int = 0


# --------------------------------------------------------------------------- public records


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class AttemptRecord(_MappingMixin):
    """The record of one attempt (SPEC §5). ``outcome`` is ``None`` while it runs."""

    number: int
    outcome: Outcome | None
    reason: str | None
    error_class: str | None
    error_type: str | None
    message: str | None
    traceback: str | None
    worker_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    mode: str | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class DeadJob(_MappingMixin):
    """A dead-letter entry (SPEC §6). Frozen; also reads like a mapping.

    ``args``/``kwargs`` are decoded from ``payload`` when the payload is JSON; for other
    serializers the :class:`~queue_core.Queue` facade decodes them.
    """

    id: str
    job_id: str
    task_name: str
    queue: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    error: str | None
    error_class: str | None
    reason: str
    attempts: list[AttemptRecord]
    dead_at: datetime
    payload: bytes = b""
    replay_of: str | None = None

    @classmethod
    def build(
        cls,
        *,
        id: str,
        job_id: str,
        task_name: str,
        queue: str,
        payload: bytes,
        error: str | None,
        error_class: str | None,
        reason: str,
        attempts: Sequence[AttemptRecord],
        dead_at_ms: int,
        replay_of: str | None = None,
    ) -> DeadJob:
        """Build an entry from stored parts, decoding JSON payloads best-effort."""
        args, kwargs = decode_json_payload(payload)
        return cls(
            id=id,
            job_id=job_id,
            task_name=task_name,
            queue=queue,
            args=args,
            kwargs=kwargs,
            error=error,
            error_class=error_class,
            reason=reason,
            attempts=list(attempts),
            dead_at=dt_from_ms(dead_at_ms),  # type: ignore[arg-type]
            payload=payload,
            replay_of=replay_of,
        )


def decode_json_payload(payload: bytes) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Decode the core's JSON payload envelope; ``((), {})`` if it is not one.

    Never raises: a corrupt payload -- also one nested too deeply for the decoder
    (``RecursionError``) -- decodes as ``((), {})`` and stays readable as ``payload``, so
    one bad entry cannot break a listing of dead letters."""
    if not payload[:1] == b"{":
        return (), {}
    try:
        obj = json.loads(payload)
        args = obj.get("args", [])
        kwargs = obj.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return tuple(args), kwargs
    except (ValueError, AttributeError, RecursionError):
        pass
    return (), {}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class JobRecord(Record):
    """A job as the storage keeps it (``Storage.get_job``)."""

    id: str
    task_name: str
    queue: str
    state: JobState
    reason: str | None
    payload: bytes
    result: bytes | None
    error: ErrorInfo | None
    """The error of the last failed attempt, if any."""
    attempts: int
    """Attempts started so far."""
    max_attempts: int
    priority: int
    enqueued_at: int
    run_at: int
    started_at: int | None
    """Start of the latest attempt."""
    finished_at: int | None
    options: str | None = None
    replay_of: str | None = None
    dead_id: str | None = None
    """Dead-letter entry id when the job is dead."""
    cancel_requested: bool = False
    execution_id: str | None = None
    """Flows: the execution this job is a step of."""
    step_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class JobInfo(_MappingMixin):
    """What ``JobHandle.info()`` returns (SPEC §2)."""

    id: str
    state: JobState
    reason: str | None
    task_name: str
    queue: str
    attempts: int
    max_attempts: int
    result: Any
    error: str | None
    error_class: str | None
    priority: int
    enqueued_at: datetime | None
    run_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    replay_of: str | None = None
    dead_id: str | None = None

"""Rows of the SQL backend to queue-core records and back, by column name.

Rows are whatever the driver hands back with names: :class:`sqlite3.Row` or psycopg's
``dict_row`` dictionaries; both are read as ``row["column"]``. The columns a row must
carry are those the named query in ``backends/sql/sql/*.sql`` selects. A template's rows
(:class:`TemplateRows`) are the values many jobs of one ``Task.map`` share.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any, Final, NamedTuple, Protocol

from queue_core.records.corrupt import mark_job, problems, salvage
from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    AttemptRecord,
    ClaimedJob,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    NewJob,
    Outcome,
    decode_json_payload,
    dt_from_ms,
)
from queue_core.rules.leases import queued_expiry, step_deadline
from queue_core.rules.outcomes import end_state

__all__ = [
    "JOB_COLUMNS",
    "TEMPLATE_COLUMNS",
    "EndRow",
    "Grave",
    "Order",
    "SPEC_FIELDS",
    "Row",
    "TemplateRows",
    "attempt_from_row",
    "attempt_json",
    "claimed_from_row",
    "dead_entry",
    "dead_from_row",
    "end_values",
    "job_from_row",
    "job_row",
    "order_of",
    "spec_of_dead",
]


class EndRow(NamedTuple):
    """One end of a finish batch as statement values, in the order of the ``VALUES``
    rows of ``finish`` (after ``now``, which the dialect puts first)."""

    id: str
    attempt: int
    token: str
    state: str
    reason: str | None
    requeue: bool
    delay_ms: int | None
    lost_delay_ms: int | None
    result: bytes | None
    has_error: bool
    error_class: str | None
    error_type: str | None
    message: str | None
    traceback: str | None
    outcome: str
    a_reason: str | None
    mode: str | None
    dead_id: str | None
    refund: bool
    """The attempt spent none of the retry budget (``Decision.spends_attempt`` false):
    ``max_attempts`` grows by one."""
    started_ago: int | None = None
    """A held attempt whose start is told with its end (``start_and_finish``): its body
    started this many ms before the finish's ``now``; ``None``: the stored start stands."""


Grave = tuple[str, str, str, ErrorInfo | None]
"""A dead-letter entry to write: (job id, dead id, reason, the ending attempt's error)."""
Order = tuple[int, int, int]
"""How claimed jobs are ordered: (-priority, place in line, seq)."""


def order_of(r: Any) -> Order:
    """How claimed row ``r`` is ordered: (-priority, place in line, seq), the place being
    ``place_at`` when the row has one (a reaped job, ``tables.PLACE``), else ``run_at``; a
    value that is not an integer (a corrupt row, dead-lettered after the claim) counts as
    0."""
    p, ra = r["priority"], r["run_at"]
    place = r["place_at"] if "place_at" in r.keys() else None
    if type(place) is int:
        ra = place
    return (-p if type(p) is int else 0, ra if type(ra) is int else 0, r["seq"])


class Row(Protocol):
    """A result row read by column name."""

    def __getitem__(self, key: str, /) -> Any: ...

    def keys(self) -> Iterable[str]: ...


SPEC_FIELDS = (
    "priority",
    "max_attempts",
    "lost_delay_ms",
    "timeout_ms",
    "heartbeat_ms",
    "schedule_to_start_ms",
    "concurrency_key",
    "concurrency_limit",
    "concurrency_skip",
    "options",
    "execution_id",
    "step_id",
    "rate_key",
    "concurrency_behavior",
    "concurrency_group",
    "debounce_key",
    "debounce_ms",
    "debounce_max_ms",
)
"""The enqueue options a dead-letter entry's ``spec`` JSON carries; the rest of the
:class:`NewJob` (task, queue, payload) is in the entry's own columns. A flow step's
``execution_id`` makes its replay refused (:func:`~queue_core.rules.outcomes.replay_job`)."""

_ATTEMPT_COLS = (
    "number",
    "outcome",
    "reason",
    "error_class",
    "error_type",
    "message",
    "traceback",
    "worker_id",
    "started_at",
    "finished_at",
    "mode",
)


def _blob(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


JOB_COLUMNS = (
    "id", "task_name", "queue", "payload", "priority", "state", "reason", "enqueued_at",
    "run_at", "expires_at", "max_attempts", "lost_delay_ms", "timeout_ms", "heartbeat_ms",
    "schedule_to_start_ms", "concurrency_key", "concurrency_limit", "concurrency_skip",
    "options", "replay_of", "attempt", "finished_at", "cancel_requested",
)  # fmt: skip
"""The columns of a new ``qc_jobs`` row, in :func:`job_row` order (SQLite ``insert_job``)."""


def job_row(
    j: NewJob, t: int, state: JobState = JobState.QUEUED, reason: str | None = None
) -> tuple[Any, ...]:
    """The values of the ``qc_jobs`` row of ``j`` enqueued at ``t``, in
    :data:`JOB_COLUMNS` order (a ``SKIPPED`` job ends at once)."""
    ready = (j.run_at if j.run_at is not None else t) + j.delay_ms
    queued = state is JobState.QUEUED
    sts = j.schedule_to_start_ms
    return (
        j.id, j.task_name, j.queue, j.payload, j.priority, state.value, reason, t, ready,
        queued_expiry(ready, sts) if queued else None, j.max_attempts, j.lost_delay_ms,
        j.timeout_ms, j.heartbeat_ms, sts, j.concurrency_key, j.concurrency_limit,
        j.concurrency_skip, j.options, j.replay_of, 0, None if queued else t, False,
    )  # fmt: skip


def claimed_from_row(r: Row, start_by: int | None = None) -> ClaimedJob:
    """A started job from a claim row (``claim`` or ``select_ready`` + ``start_job``).

    A flow step's ``deadline`` is :func:`~queue_core.rules.leases.step_deadline`;
    ``start_by`` is a rate-limited claim's (:attr:`ClaimedJob.start_by`)."""
    flow_end = r["flow_deadline_at"]
    try:
        deadline = step_deadline(r["deadline"], flow_end)
        payload = bytes(r["payload"])
    except (TypeError, ValueError):  # a corrupt row: kept as read, for split_claimed
        deadline, payload = r["deadline"], r["payload"]
    return ClaimedJob(
        id=r["id"],
        task_name=r["task_name"],
        queue=r["queue"],
        payload=payload,
        attempt=r["attempt"],
        lease_token=r["lease_token"],
        lease_expires_at=r["lease_expires_at"],
        deadline=deadline,
        max_attempts=r["max_attempts"],
        priority=r["priority"],
        timeout_ms=r["timeout_ms"],
        heartbeat_ms=r["heartbeat_ms"],
        options=r["options"],
        enqueued_at=r["enqueued_at"],
        replay_of=r["replay_of"],
        started_at=r["started_at"],
        run_at=r["run_at"],
        execution_id=r["execution_id"],
        step_id=r["step_id"],
        flow_deadline_at=flow_end,
        start_by=start_by,
    )


def job_from_row(r: Row) -> JobRecord:
    """A :class:`JobRecord` from a whole ``qc_jobs`` row; a row with a column that does
    not read as its type (SQLite keeps whatever is written) gives the salvaged record
    saying so (:mod:`queue_core.records.corrupt`: reason ``corrupt_record``)."""
    try:
        record = _job_from_row(r)
    except (TypeError, ValueError, KeyError):
        return _salvaged_job(r)
    return _salvaged_job(r) if problems(record) else record


_JOB_COLUMNS = {"attempts": "attempt"}
"""The :class:`JobRecord` fields whose column has another name (the rest: the same)."""


def _salvaged_job(r: Row) -> JobRecord:
    def column(name: str) -> Any:
        return lambda: r[_JOB_COLUMNS.get(name, name)]

    read = {f: column(f) for f in ("id", "task_name", "queue", "reason", "attempts",
                                    "max_attempts", "priority", "enqueued_at", "run_at",
                                    "started_at", "finished_at", "options", "replay_of",
                                    "dead_id", "execution_id", "step_id")}  # fmt: skip
    read.update(
        state=lambda: JobState(r["state"]),
        payload=lambda: bytes(r["payload"]),
        result=lambda: _blob(r["result"]),
        error=lambda: _error(r),
        cancel_requested=lambda: bool(r["cancel_requested"]),
    )
    record, found = salvage(JobRecord, read)
    return mark_job(record, found)


def _error(r: Row) -> ErrorInfo | None:
    if r["error_class"] is None:
        return None
    return ErrorInfo(
        error_class=r["error_class"],
        error_type=r["error_type"] or r["error_class"],
        message=r["error_message"] or "",
        traceback=r["error_traceback"],
    )


def _job_from_row(r: Row) -> JobRecord:
    error = None
    if r["error_class"] is not None:
        error = ErrorInfo(
            error_class=r["error_class"],
            error_type=r["error_type"] or r["error_class"],
            message=r["error_message"] or "",
            traceback=r["error_traceback"],
        )
    return JobRecord(
        id=r["id"],
        task_name=r["task_name"],
        queue=r["queue"],
        state=JobState(r["state"]),
        reason=r["reason"],
        payload=bytes(r["payload"]),
        result=_blob(r["result"]),
        error=error,
        attempts=r["attempt"],
        max_attempts=r["max_attempts"],
        priority=r["priority"],
        enqueued_at=r["enqueued_at"],
        run_at=r["run_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        options=r["options"],
        replay_of=r["replay_of"],
        dead_id=r["dead_id"],
        cancel_requested=bool(r["cancel_requested"]),
        execution_id=r["execution_id"],
        step_id=r["step_id"],
    )


def attempt_from_row(r: Row) -> AttemptRecord:
    """An :class:`AttemptRecord` from a ``qc_attempts`` row (or its JSON copy)."""
    outcome = r["outcome"]
    return AttemptRecord(
        number=r["number"],
        outcome=Outcome(outcome) if outcome is not None else None,
        reason=r["reason"],
        error_class=r["error_class"],
        error_type=r["error_type"],
        message=r["message"],
        traceback=r["traceback"],
        worker_id=r["worker_id"],
        started_at=dt_from_ms(r["started_at"]),
        finished_at=dt_from_ms(r["finished_at"]),
        mode=r["mode"],
    )


def attempt_json(r: Row) -> dict[str, Any]:
    """The JSON form of an attempt record, as a dead-letter entry keeps it."""
    return {c: r[c] for c in _ATTEMPT_COLS}


def dead_from_row(r: Row) -> DeadJob:
    """A :class:`DeadJob` from a ``qc_dead`` row; one that does not read as written is
    salvaged field by field (:func:`queue_core.records.corrupt.salvage`)."""
    try:
        entry = _dead_from_row(r)
    except (TypeError, ValueError, KeyError, AttributeError):
        entry = None
    if entry is not None and not problems(entry):
        return entry
    return _salvaged_dead(r)


def _salvaged_dead(r: Row) -> DeadJob:
    payload = r["payload"] if isinstance(r["payload"], (bytes, memoryview)) else b""
    args, kwargs = decode_json_payload(bytes(payload))

    def column(name: str) -> Any:
        return lambda: r[name]

    names = ("id", "job_id", "task_name", "queue", "error", "error_class", "reason", "replay_of")
    entry, _ = salvage(
        DeadJob,
        {
            **{f: column(f) for f in names},
            "args": lambda: args,
            "kwargs": lambda: kwargs,
            "payload": lambda: bytes(payload),
            "attempts": lambda: _dead_from_row(r).attempts,
            "dead_at": lambda: dt_from_ms(r["dead_at"]),
        },
    )  # fmt: skip
    return entry


def _dead_from_row(r: Row) -> DeadJob:
    attempts = [
        attempt_from_row({c: a.get(c) for c in _ATTEMPT_COLS}) for a in json.loads(r["attempts"])
    ]
    return DeadJob.build(
        id=r["id"],
        job_id=r["job_id"],
        task_name=r["task_name"],
        queue=r["queue"],
        payload=bytes(r["payload"]),
        error=r["error"],
        error_class=r["error_class"],
        reason=r["reason"],
        attempts=attempts,
        dead_at_ms=r["dead_at"],
        replay_of=r["replay_of"],
    )


def dead_entry(
    r: Row,
    *,
    dead_id: str,
    reason: str,
    error: ErrorInfo | None,
    attempts: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ``qc_dead`` row for the job row ``r`` (a ``select_for_dead`` row): its spec
    as enqueued (what :func:`queue_core.rules.outcomes.replay_job` replays)."""
    spec = {f: r[f] for f in SPEC_FIELDS}
    spec["concurrency_skip"] = bool(spec["concurrency_skip"])
    return {
        "id": dead_id,
        "job_id": r["id"],
        "task_name": r["task_name"],
        "queue": r["queue"],
        "payload": r["payload"],
        "error": error.message if error else None,
        "error_class": error.error_class if error else None,
        "reason": reason,
        "attempts": json.dumps(attempts),
        "dead_at": r["finished_at"],
        "replay_of": r["replay_of"],
        "spec": json.dumps(spec, default=_json_safe),
    }


def _json_safe(value: Any) -> str:
    """A value JSON cannot carry (a corrupt row's bytes) as text, so burying never fails."""
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return repr(value)


def spec_of_dead(r: Row) -> NewJob:
    """The job as it was enqueued, from a ``qc_dead`` row (older entries may lack keys:
    the :class:`NewJob` defaults fill them)."""
    spec = json.loads(r["spec"])
    return NewJob(
        id=r["job_id"],
        task_name=r["task_name"],
        queue=r["queue"],
        payload=bytes(r["payload"]),
        replay_of=r["replay_of"],
        **{k: spec[k] for k in SPEC_FIELDS if k in spec},
    )


def end_values(e: AttemptEnd) -> EndRow:
    """One end of a finish batch as statement values (the job's state and reason from
    :func:`~queue_core.rules.outcomes.end_state`)."""
    d = e.decision
    state, reason = end_state(d, e.reason)
    requeue = state is JobState.QUEUED
    err = e.error
    return EndRow(
        e.ref.job_id, e.ref.attempt, e.ref.lease_token, state.value, reason, requeue,
        d.delay_ms if requeue else None, d.lost_delay_ms if requeue else None,
        e.result if d.action is Action.COMPLETE else None, err is not None,
        err.error_class if err else None, err.error_type if err else None,
        err.message if err else None, err.traceback if err else None, e.outcome.value,
        e.reason, e.mode, uuid.uuid4().hex if state is JobState.DEAD else None,
        not d.spends_attempt,
    )  # fmt: skip


# --------------------------------------------------------------------------- template rows

_PER_JOB: Final = ("id", "payload", "lost_delay_ms")
TEMPLATE_COLUMNS: Final = _PER_JOB + tuple(c for c in JOB_COLUMNS if c not in _PER_JOB)
"""The columns of a template's rows: the per-job three, then those a batch shares."""


def shared_values(template: NewJob, t: int) -> tuple[Any, ...]:
    """The values of :data:`TEMPLATE_COLUMNS` after the first three, for jobs of
    ``template`` enqueued at ``t`` (taken from :func:`job_row`)."""
    row = dict(zip(JOB_COLUMNS, job_row(template, t), strict=True))
    return tuple(row[c] for c in TEMPLATE_COLUMNS[len(_PER_JOB) :])


class TemplateRows:
    """The rows of jobs that differ from ``template`` only in id, payload and lost delay
    (``Task.map``'s batch): ``job + at(t)`` is :func:`job_row` of each, in
    :data:`TEMPLATE_COLUMNS` order, one tuple concatenation per job.

    Of the shared values only ``enqueued_at`` (``t``), and ``run_at`` and ``expires_at``
    when they follow the storage's clock, depend on ``t``, each as ``t`` plus a constant,
    and they are adjacent columns: found by comparing the values at ``t = 0`` and ``t = 1``
    (so :func:`job_row` stays the one rule), kept as the values before them (``head``),
    their offsets and the values after them (``tail``). ``extra`` holds what a dialect
    derives from the template once (its statement, its parameters).
    """

    __slots__ = ("extra", "head", "offsets", "tail", "template")

    def __init__(self, template: NewJob) -> None:
        at0, at1 = shared_values(template, 0), shared_values(template, 1)
        moving = [i for i, (a, b) in enumerate(zip(at0, at1, strict=True)) if a != b]
        lo, hi = moving[0], moving[-1] + 1
        if moving != list(range(lo, hi)) or any(at1[i] != at0[i] + 1 for i in moving):
            raise AssertionError(f"unexpected clock-dependent columns {moving}")
        self.template = template
        self.head, self.offsets, self.tail = at0[:lo], at0[lo:hi], at0[hi:]
        self.extra: dict[str, Any] = {}

    def at(self, t: int) -> tuple[Any, ...]:
        """``shared_values(template, t)``."""
        return self.head + tuple([t + o for o in self.offsets]) + self.tail

    def times(self, t: int) -> tuple[int, ...]:
        """The values of ``at(t)`` that follow ``t``."""
        return tuple([t + o for o in self.offsets])

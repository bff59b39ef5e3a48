"""Rows of the SQL backend to queue-core records and back, by column name.

Rows are whatever the driver hands back with names: :class:`sqlite3.Row` or psycopg's
``dict_row`` dictionaries; both are read as ``row["column"]``. The columns a row must
carry are those the named query in ``backends/sql/sql/*.sql`` selects.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol

from queue_core.model import (
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
    dt_from_ms,
)
from queue_core.policy.outcomes import end_state

__all__ = [
    "JOB_COLUMNS",
    "EndRow",
    "SPEC_FIELDS",
    "Row",
    "attempt_from_row",
    "attempt_json",
    "claimed_from_row",
    "dead_entry",
    "dead_from_row",
    "end_values",
    "job_from_row",
    "job_row",
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
)
"""The enqueue options a dead-letter entry's ``spec`` JSON carries; the rest of the
:class:`NewJob` (task, queue, payload) is in the entry's own columns. A flow step's
``execution_id`` makes its replay refused (:func:`~queue_core.policy.outcomes.replay_job`)."""

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
        ready + sts if queued and sts is not None else None, j.max_attempts, j.lost_delay_ms,
        j.timeout_ms, j.heartbeat_ms, sts, j.concurrency_key, j.concurrency_limit,
        j.concurrency_skip, j.options, j.replay_of, 0, None if queued else t, False,
    )  # fmt: skip


def claimed_from_row(r: Row) -> ClaimedJob:
    """A started job from a claim row (``claim`` or ``select_ready`` + ``start_job``).

    A flow step's ``deadline`` is the earlier of its attempt's and its execution's."""
    deadline, flow_end = r["deadline"], r["flow_deadline_at"]
    if flow_end is not None:
        deadline = flow_end if deadline is None else min(deadline, flow_end)
    return ClaimedJob(
        id=r["id"],
        task_name=r["task_name"],
        queue=r["queue"],
        payload=bytes(r["payload"]),
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
    )


def job_from_row(r: Row) -> JobRecord:
    """A :class:`JobRecord` from a whole ``qc_jobs`` row."""
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
    """A :class:`DeadJob` from a ``qc_dead`` row."""
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
    as enqueued (what :func:`queue_core.policy.outcomes.replay_job` replays)."""
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
        "spec": json.dumps(spec),
    }


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
    :func:`~queue_core.policy.outcomes.end_state`)."""
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
    )  # fmt: skip

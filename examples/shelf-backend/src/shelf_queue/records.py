"""How a job, an attempt and a dead letter look in the JSON document, and how they turn
back into queue-core's records.

A job is a dict: ``spec`` is the :class:`~queue_core.records.jobs.NewJob` as enqueued (never
changed afterwards, so a dead letter can copy it for ``retry_dead``), beside the fields
that change: state, ready time, the current attempt's lease, the attempt list. Bytes
(payloads, results) are stored as base64 text.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from queue_core.records.jobs import (
    AttemptRecord,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    NewJob,
    Outcome,
    dt_from_ms,
)

__all__ = [
    "attempt_record",
    "dead_record",
    "error_of",
    "from_b64",
    "job_record",
    "new_job_of",
    "spec_of",
    "to_b64",
]

Row = dict[str, Any]


def to_b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def from_b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def spec_of(job: NewJob) -> Row:
    """A ``NewJob`` as JSON-ready data."""
    row = dataclasses.asdict(job)
    row["payload"] = to_b64(job.payload)
    return row


def new_job_of(row: Row) -> NewJob:
    """The ``NewJob`` :func:`spec_of` stored."""
    return NewJob(**{**row, "payload": from_b64(row["payload"])})


def error_of(row: Row | None) -> ErrorInfo | None:
    return None if row is None else ErrorInfo(**row)


def attempt_record(row: Row) -> AttemptRecord:
    error = error_of(row["error"])
    return AttemptRecord(
        number=row["number"],
        outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
        reason=row["reason"],
        error_class=error.error_class if error else None,
        error_type=error.error_type if error else None,
        message=error.message if error else None,
        traceback=error.traceback if error else None,
        worker_id=row["worker_id"],
        started_at=dt_from_ms(row["started_at"]),
        finished_at=dt_from_ms(row["finished_at"]),
        mode=row["mode"],
    )


def job_record(job: Row) -> JobRecord:
    spec = job["spec"]
    return JobRecord(
        id=spec["id"],
        task_name=spec["task_name"],
        queue=spec["queue"],
        state=JobState(job["state"]),
        reason=job["reason"],
        payload=from_b64(spec["payload"]) or b"",
        result=from_b64(job["result"]),
        error=error_of(job["error"]),
        attempts=job["attempt"],
        max_attempts=spec["max_attempts"],
        priority=spec["priority"],
        enqueued_at=job["enqueued_at"],
        run_at=job["ready_at"],
        started_at=job["started_at"],
        finished_at=job["finished_at"],
        options=spec["options"],
        replay_of=spec["replay_of"],
        dead_id=job["dead_id"],
        cancel_requested=job["cancel"],
    )


def dead_record(entry: Row) -> DeadJob:
    """The public entry, built by the model's own builder (it decodes JSON payloads)."""
    spec = entry["spec"]
    return DeadJob.build(
        id=entry["id"],
        job_id=spec["id"],
        task_name=spec["task_name"],
        queue=spec["queue"],
        payload=from_b64(spec["payload"]) or b"",
        error=entry["error"],
        error_class=entry["error_class"],
        reason=entry["reason"],
        attempts=[attempt_record(a) for a in entry["attempts"]],
        dead_at_ms=entry["dead_at"],
        replay_of=spec["replay_of"],
    )

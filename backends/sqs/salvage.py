"""A job item that does not read as written (a poison item), salvaged field by field for
the read paths (:mod:`queue_core.records.corrupt`; the attribute names are in
:mod:`backends.sqs.codec`)."""

from __future__ import annotations

from typing import Any

from queue_core.records.corrupt import mark_job, salvage
from queue_core.records.jobs import ErrorInfo, JobRecord, JobState

__all__ = ["salvaged_job"]

Item = dict[str, Any]

_JOB_ATTRS = {
    "id": "id", "task_name": "task", "queue": "q", "reason": "rsn", "attempts": "att",
    "max_attempts": "ma", "priority": "pr", "enqueued_at": "enq", "run_at": "ra",
    "started_at": "sa", "finished_at": "fa", "options": "opt", "replay_of": "rof",
    "dead_id": "did", "execution_id": "xid", "step_id": "xs", "result": "res",
}  # fmt: skip
_OPTIONAL_ATTRS = {"rsn", "sa", "fa", "opt", "rof", "did", "xid", "xs", "res"}


def salvaged_job(item: Item, payload: bytes) -> JobRecord:
    """The record of ``item`` with what could be read, reason ``corrupt_record``."""

    def attr(name: str) -> Any:
        return lambda: item.get(name) if name in _OPTIONAL_ATTRS else item[name]

    read: dict[str, Any] = {f: attr(a) for f, a in _JOB_ATTRS.items()}
    read.update(
        state=lambda: JobState(item["st"]),
        payload=lambda: payload,
        error=lambda: _job_error(item.get("err")),
        cancel_requested=lambda: bool(item.get("cxl", False)),
    )
    record, found = salvage(JobRecord, read)
    return mark_job(record, found)


def _job_error(err: Any) -> ErrorInfo | None:
    if not err:
        return None
    return ErrorInfo(
        error_class=err.get("ec", ""),
        error_type=err.get("et", ""),
        message=err.get("msg", ""),
        traceback=err.get("tb"),
    )

"""Decoding of what the Redis backend stores: a job hash and its attempt list, a
dead-letter hash (the field names are in ``docs/backends/redis.md``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from queue_core.model import (
    AttemptRecord,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    Outcome,
    dt_from_ms,
)

__all__ = [
    "DEAD_FIELDS",
    "OUTCOMES",
    "STATES",
    "attempt_from_json",
    "dead_job",
    "int_or_none",
    "job_record",
    "running_attempt",
    "str_or_none",
]

STATES = {s.value.encode(): s for s in JobState}
OUTCOMES = {o.value: o for o in Outcome}
DEAD_FIELDS = ["jid", "tn", "q", "pl", "em", "ec", "rs", "at", "da", "ro"]
"""The fields of a dead-letter hash, in the order :func:`dead_job` reads them."""


def int_or_none(value: bytes | int | None) -> int | None:
    return None if value is None else int(value)


def str_or_none(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def attempt_from_json(raw: bytes | str) -> AttemptRecord:
    """One finished attempt, as ``finish.lua`` and ``reap.lua`` push it (a JSON array)."""
    n, wid, sa, fa, outcome, reason, ec, et, msg, tb, mode = json.loads(raw)
    return AttemptRecord(
        number=n,
        outcome=OUTCOMES[outcome] if outcome is not None else None,
        reason=reason,
        error_class=ec,
        error_type=et,
        message=msg,
        traceback=tb,
        worker_id=wid,
        started_at=dt_from_ms(sa),
        finished_at=dt_from_ms(fa),
        mode=mode,
    )


def running_attempt(att: bytes, wid: bytes | None, sa: bytes | None) -> AttemptRecord:
    """The attempt of a running job (``att``, ``wid`` and ``sa`` of its hash)."""
    return AttemptRecord(
        number=int(att),
        outcome=None,
        reason=None,
        error_class=None,
        error_type=None,
        message=None,
        traceback=None,
        worker_id=str_or_none(wid),
        started_at=dt_from_ms(int_or_none(sa)),
        finished_at=None,
        mode=None,
    )


def job_record(job_id: str, h: dict[bytes, bytes], recs: list[bytes]) -> JobRecord:
    """The record of job ``job_id`` from its hash ``h`` and attempt list ``recs``."""
    error: ErrorInfo | None = None
    for raw in reversed(recs):
        rec = json.loads(raw)
        if rec[6] is not None:
            error = ErrorInfo(
                error_class=rec[6], error_type=rec[7], message=rec[8], traceback=rec[9]
            )
            break
    g = h.get
    return JobRecord(
        id=job_id,
        task_name=h[b"tn"].decode(),
        queue=h[b"q"].decode(),
        state=STATES[h[b"st"]],
        reason=str_or_none(g(b"rs")),
        payload=h[b"pl"],
        result=g(b"res"),
        error=error,
        attempts=int(h[b"att"]),
        max_attempts=int(h[b"ma"]),
        priority=int(h[b"pr"]),
        enqueued_at=int(h[b"eq"]),
        run_at=int(h[b"ra"]),
        started_at=int_or_none(g(b"sa")),
        finished_at=int_or_none(g(b"fa")),
        options=str_or_none(g(b"op")),
        replay_of=str_or_none(g(b"ro")),
        dead_id=str_or_none(g(b"did")),
        cancel_requested=b"cr" in h,
        execution_id=str_or_none(g(b"x")),
        step_id=str_or_none(g(b"xn")),
    )


def dead_job(dead_id: str, f: Sequence[Any]) -> DeadJob:
    """The dead-letter entry ``dead_id`` from the values of :data:`DEAD_FIELDS`."""
    return DeadJob.build(
        id=dead_id,
        job_id=f[0].decode(),
        task_name=f[1].decode(),
        queue=f[2].decode(),
        payload=f[3],
        error=str_or_none(f[4]),
        error_class=str_or_none(f[5]),
        reason=f[6].decode(),
        attempts=[attempt_from_json(json.dumps(a)) for a in json.loads(f[7])],
        dead_at_ms=int(f[8]),
        replay_of=str_or_none(f[9]),
    )

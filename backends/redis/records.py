"""What the Redis backend stores, both ways: a job's script arguments, and the decoding of a
job hash and its attempt list, a dead-letter hash and a reaped job (the field names are in
``docs/backends/redis.md``). Pure: no client, no I/O."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

from queue_core.records.corrupt import mark_job, salvage
from queue_core.records.jobs import (
    AttemptRecord,
    DeadJob,
    ErrorInfo,
    JobRecord,
    JobState,
    NewJob,
    Outcome,
    ReapedJob,
    Reason,
    decode_json_payload,
    dt_from_ms,
)

__all__ = [
    "DEAD_FIELDS",
    "OUTCOMES",
    "STATES",
    "attempt_from_json",
    "dead_job",
    "enqueue_args",
    "int_or_none",
    "is_plain",
    "job_args",
    "job_record",
    "opt",
    "reaped_jobs",
    "running_attempt",
    "str_or_none",
    "with_last",
]

STATES = {s.value.encode(): s for s in JobState}
OUTCOMES = {o.value: o for o in Outcome}
DEAD_FIELDS = ["jid", "tn", "q", "pl", "em", "ec", "rs", "at", "da", "ro"]
"""The fields of a dead-letter hash, in the order :func:`dead_job` reads them."""


def opt(value: int | str | None) -> str | int:
    """An optional argument of a script: ``''`` for ``None`` (what the scripts test)."""
    return "" if value is None else value


def job_args(j: NewJob) -> list[Any]:
    """The 16 arguments of one job for ``flow_start.lua``; ``enqueue.lua`` takes them too,
    then those of :func:`enqueue_args`."""
    return [
        j.id,
        j.task_name,
        j.queue,
        j.payload,
        j.priority,
        opt(j.run_at),
        j.delay_ms,
        j.max_attempts,
        j.lost_delay_ms,
        opt(j.timeout_ms),
        opt(j.heartbeat_ms),
        opt(j.schedule_to_start_ms),
        opt(j.concurrency_key),
        opt(j.concurrency_limit),
        "1" if j.concurrency_skip else "0",
        opt(j.options),
    ]


def enqueue_args(j: NewJob) -> tuple[Any, ...]:
    """The 27 arguments of one job for ``enqueue.lua``."""
    return (
        *job_args(j),
        opt(j.replay_of),
        opt(j.unique_key),
        opt(j.unique_for_ms),
        opt(j.rate_key),
        opt(j.rate_limit),
        opt(j.rate_window_ms),
        opt(j.debounce_key),
        opt(j.debounce_ms),
        opt(j.debounce_max_ms),
        opt(j.concurrency_behavior),
        opt(j.concurrency_group),
    )


_NO_OPTIONS = (None,) * 9


def is_plain(j: NewJob) -> bool:
    """True when ``enqueue_plain.lua`` stores ``j`` exactly as ``enqueue.lua`` would."""
    return (
        not j.concurrency_skip
        and (
            j.unique_key,
            j.rate_key,
            j.replay_of,
            j.concurrency_key,
            j.concurrency_limit,
            j.heartbeat_ms,
            j.schedule_to_start_ms,
            j.options,
            j.debounce_key,
        )
        == _NO_OPTIONS
    )


def reaped_jobs(r: Sequence[Any]) -> list[ReapedJob]:
    """The jobs of a reply listing 5 values per job (``reap.lua``, and ``flow_apply.lua``
    for the step jobs a flow timed out): id, attempt, outcome|nil, reason, state."""
    return [
        ReapedJob(
            job_id=r[i].decode(),
            attempt=int(r[i + 1]),
            outcome=None if r[i + 2] is None else OUTCOMES[r[i + 2].decode()],
            reason=r[i + 3].decode(),
            state=STATES[r[i + 4]],
        )
        for i in range(0, len(r), 5)
    ]


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


_LA = re.compile(rb"(\d+)\|(\d+)\|(-?\d+)\|(\w+)\|(\w*)")


def with_last(recs: list[bytes], la: bytes | None, lw: bytes | None) -> list[bytes]:
    """A job's attempt list with its newest record appended when the job hash keeps it
    (fields ``la`` and ``lw``, its worker: a record naming no reason and no error, written
    by ``record_attempt`` in ``lua/_lib.lua``), as the JSON array the list would hold. An
    ``la`` that does not decode is appended as it is, so reading it fails as a corrupt
    list entry does."""
    if la is None:
        return recs
    m = _LA.fullmatch(la)
    if m is None or lw is None:
        return [*recs, la]
    n, sa, d, outcome, mode = m.groups()
    rec = [int(n), lw.decode(errors="replace"), int(sa), int(sa) + int(d), outcome.decode()]
    rec += [None] * 5 + [mode.decode() or None]
    return [*recs, json.dumps(rec).encode()]


def running_attempt(att: bytes, wid: bytes | None, sa: bytes | None) -> AttemptRecord:
    """The attempt of a running job (``att``, ``wid`` and ``sa`` of its hash)."""
    return AttemptRecord(
        number=int(att) if att is not None and att.strip().isdigit() else 0,
        outcome=None,
        reason=None,
        error_class=None,
        error_type=None,
        message=None,
        traceback=None,
        worker_id=wid.decode(errors="replace") if wid is not None else None,
        started_at=dt_from_ms(int(sa)) if sa is not None and sa.strip().isdigit() else None,
        finished_at=None,
        mode=None,
    )


def job_record(
    job_id: str, h: dict[bytes, bytes], recs: list[bytes], suffix: str = ""
) -> JobRecord:
    """The record of job ``job_id`` from its hash ``h`` and attempt list ``recs``; its
    dead-letter id gets ``suffix`` (the home's on a cluster, ``backends/redis/homes.py``).
    A hash with a field that does not decode gives the salvaged record saying so
    (:mod:`queue_core.records.corrupt`: reason ``corrupt_record``), never an error."""
    try:
        return _job_record(job_id, h, recs, suffix)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        return _salvaged_job(job_id, h, recs, suffix)


def _last_error(recs: list[bytes]) -> ErrorInfo | None:
    for raw in reversed(recs):
        rec = json.loads(raw)
        if rec[6] is not None:
            return ErrorInfo(
                error_class=rec[6], error_type=rec[7], message=rec[8], traceback=rec[9]
            )
    return None


def _job_record(job_id: str, h: dict[bytes, bytes], recs: list[bytes], suffix: str) -> JobRecord:
    g = h.get
    return JobRecord(
        id=job_id,
        task_name=h[b"tn"].decode(),
        queue=h[b"q"].decode(),
        state=STATES[h[b"st"]],
        reason=str_or_none(g(b"rs")),
        payload=h[b"pl"],
        result=g(b"res"),
        error=_last_error(recs),
        attempts=int(h[b"att"]),
        max_attempts=int(h[b"ma"]),
        priority=int(h[b"pr"]),
        enqueued_at=int(h[b"eq"]),
        run_at=int(h[b"ra"]),
        started_at=int_or_none(g(b"sa")),
        finished_at=int_or_none(g(b"fa")),
        options=str_or_none(g(b"op")),
        replay_of=str_or_none(g(b"ro")),
        dead_id=None if b"did" not in h else h[b"did"].decode() + suffix,
        cancel_requested=b"cr" in h,
        execution_id=str_or_none(g(b"x")),
        step_id=str_or_none(g(b"xn")),
    )


_TEXT = {"task_name": b"tn", "queue": b"q", "reason": b"rs", "options": b"op",
         "replay_of": b"ro", "dead_id": b"did", "execution_id": b"x", "step_id": b"xn"}  # fmt: skip
_INTS = {"attempts": b"att", "max_attempts": b"ma", "priority": b"pr", "enqueued_at": b"eq",
         "run_at": b"ra", "started_at": b"sa", "finished_at": b"fa"}  # fmt: skip
_OPTIONAL = {"reason", "options", "replay_of", "dead_id", "execution_id", "step_id",
             "started_at", "finished_at"}  # fmt: skip


def _salvaged_job(job_id: str, h: dict[bytes, bytes], recs: list[bytes], suffix: str) -> JobRecord:
    """:func:`job_record` field by field (:func:`queue_core.records.corrupt.salvage`)."""

    def field(key: bytes, convert: Any, optional: bool) -> Any:
        def read() -> Any:
            raw = h.get(key)
            return None if raw is None and optional else convert(h[key])

        return read

    read: dict[str, Any] = {
        name: field(key, lambda v: v.decode(), name in _OPTIONAL) for name, key in _TEXT.items()
    }
    read.update((name, field(key, int, name in _OPTIONAL)) for name, key in _INTS.items())
    read.update(
        id=lambda: job_id,
        state=lambda: STATES[h[b"st"]],
        payload=lambda: h[b"pl"],
        result=lambda: h.get(b"res"),
        error=lambda: _last_error(recs),
        cancel_requested=lambda: b"cr" in h,
    )
    if suffix:
        read["dead_id"] = lambda: None if h.get(b"did") is None else h[b"did"].decode() + suffix
    record, found = salvage(JobRecord, read)
    return mark_job(record, found)


def dead_job(dead_id: str, f: Sequence[Any]) -> DeadJob:
    """The dead-letter entry ``dead_id`` from the values of :data:`DEAD_FIELDS`; an entry
    with a field that does not decode is salvaged field by field (reason
    ``corrupt_record`` when the reason itself is unreadable), never an error."""
    try:
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
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        return _salvaged_dead(dead_id, f)


def _salvaged_dead(dead_id: str, f: Sequence[Any]) -> DeadJob:
    """:func:`dead_job` field by field (:func:`queue_core.records.corrupt.salvage`)."""

    def text(k: int, optional: bool = False) -> Any:
        return lambda: None if f[k] is None and optional else f[k].decode()

    args, kwargs = decode_json_payload(f[3] if isinstance(f[3], bytes) else b"")
    entry, found = salvage(
        DeadJob,
        {
            "id": lambda: dead_id,
            "job_id": text(0),
            "task_name": text(1),
            "queue": text(2),
            "payload": lambda: f[3],
            "args": lambda: args,
            "kwargs": lambda: kwargs,
            "error": text(4, True),
            "error_class": text(5, True),
            "reason": text(6),
            "attempts": lambda: [attempt_from_json(json.dumps(a)) for a in json.loads(f[7])],
            "dead_at": lambda: dt_from_ms(int(f[8])),
            "replay_of": text(9, True),
        },
    )
    if found and not entry.reason:
        entry = dataclasses.replace(entry, reason=Reason.CORRUPT_RECORD.value)
    return entry

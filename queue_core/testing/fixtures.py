"""Builders for the protocol records the contract suite (and other tests) use.

Every builder fills the fields a test does not care about with plain defaults, so a
test states only what it checks. Times are epoch milliseconds around :data:`T0`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

from queue_core.records.jobs import (
    Action,
    AttemptEnd,
    AttemptRecord,
    ClaimedJob,
    Decision,
    ErrorInfo,
    JobState,
    LeaseRef,
    NewJob,
    Outcome,
    Reason,
)
from queue_core.storage.job_ids import new_job_id
from queue_core.storage.protocol import Storage

__all__ = [
    "DAY",
    "DEFAULT_PAYLOAD",
    "HOUR",
    "LEASE",
    "MIN",
    "SEC",
    "T0",
    "attempt_record",
    "cancel_end",
    "claim_one",
    "complete_end",
    "dead_end",
    "enqueue_one",
    "error_info",
    "new_id",
    "new_job",
    "released_end",
    "retry_end",
    "run_concurrently",
    "timed_out_end",
]

T0 = 1_700_000_000_000
"""A fixed base time (epoch ms, 2023-11-14T22:13:20Z); tests pass offsets from it."""
SEC = 1_000
MIN = 60 * SEC
HOUR = 60 * MIN
DAY = 24 * HOUR
LEASE = 30 * SEC
"""The lease the suite claims with unless a test says otherwise."""
DEFAULT_PAYLOAD = b'{"args":[1,"x"],"kwargs":{"k":2}}'

T = TypeVar("T")


def new_id() -> str:
    """A fresh job id (a version-7 UUID's 32 hex digits, as the core makes them)."""
    return new_job_id()


def new_job(
    *,
    id: str | None = None,
    task_name: str = "tests.task",
    queue: str = "default",
    payload: bytes = DEFAULT_PAYLOAD,
    **fields: Any,
) -> NewJob:
    """A :class:`NewJob` with a fresh id; any other field may be given by keyword."""
    return NewJob(id=id or new_id(), task_name=task_name, queue=queue, payload=payload, **fields)


def enqueue_one(storage: Storage, *, now: int = T0, **fields: Any) -> str:
    """Enqueue one :func:`new_job` at ``now``, check it is ``queued``; return its id."""
    job = new_job(**fields)
    states = storage.enqueue([job], now=now)
    assert states == [JobState.QUEUED], states
    return job.id


def claim_one(
    storage: Storage,
    *,
    now: int,
    queues: Sequence[str] = ("default",),
    lease_ms: int = LEASE,
    worker_id: str = "worker-1",
) -> ClaimedJob:
    """Claim with a limit of 5 and check that exactly one job came back."""
    got = storage.claim(worker_id, list(queues), 5, lease_ms, now=now)
    assert len(got) == 1, f"expected exactly one claimed job, got {len(got)}"
    return got[0]


def error_info(
    error_class: str = "ValueError",
    message: str = "boom",
    *,
    module: str = "builtins",
    traceback: str | None = "Traceback (most recent call last):\nValueError: boom\n",
) -> ErrorInfo:
    """An :class:`ErrorInfo` for ``module.error_class``."""
    return ErrorInfo(
        error_class=error_class,
        error_type=f"{module}.{error_class}",
        message=message,
        traceback=traceback,
    )


def attempt_record(
    number: int = 1,
    outcome: Outcome | None = None,
    *,
    reason: str | None = None,
    error_class: str | None = None,
    error_type: str | None = None,
    message: str | None = None,
    traceback: str | None = None,
    worker_id: str | None = "w",
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
    mode: str | None = "thread",
) -> AttemptRecord:
    """An :class:`AttemptRecord` (``outcome`` ``None``: still running) with the fields a
    test does not name left empty: no reason, no error, worker ``w``, no times."""
    return AttemptRecord(
        number=number,
        outcome=outcome,
        reason=reason,
        error_class=error_class,
        error_type=error_type,
        message=message,
        traceback=traceback,
        worker_id=worker_id,
        started_at=started_at,
        finished_at=finished_at,
        mode=mode,
    )


def complete_end(ref: LeaseRef, result: bytes = b'"ok"', *, mode: str = "thread") -> AttemptEnd:
    """A successful attempt end: ``COMPLETE`` with ``result``."""
    return AttemptEnd(
        ref=ref,
        outcome=Outcome.SUCCEEDED,
        decision=Decision(action=Action.COMPLETE),
        result=result,
        mode=mode,
    )


def retry_end(
    ref: LeaseRef,
    delay_ms: int,
    *,
    error: ErrorInfo | None = None,
    lost_delay_ms: int | None = None,
    outcome: Outcome = Outcome.FAILED,
    reason: str = Reason.ERROR.value,
    mode: str = "thread",
) -> AttemptEnd:
    """A failed attempt end that the core decided to retry after ``delay_ms``."""
    return AttemptEnd(
        ref=ref,
        outcome=outcome,
        reason=reason,
        error=error if error is not None else error_info(),
        decision=Decision(action=Action.RETRY, delay_ms=delay_ms, lost_delay_ms=lost_delay_ms),
        mode=mode,
    )


def released_end(ref: LeaseRef, *, mode: str = "thread") -> AttemptEnd:
    """An attempt released when its worker's shutdown grace ended: ``lost`` with
    ``worker_shutdown``, retried at once and spending no attempt (SPEC §4)."""
    return AttemptEnd(
        ref=ref,
        outcome=Outcome.LOST,
        reason=Reason.WORKER_SHUTDOWN.value,
        decision=Decision(action=Action.RETRY, spends_attempt=False),
        mode=mode,
    )


def dead_end(
    ref: LeaseRef,
    *,
    dead_reason: str | None = Reason.FATAL.value,
    error: ErrorInfo | None = None,
    outcome: Outcome = Outcome.FAILED,
    reason: str = Reason.ERROR.value,
    mode: str = "thread",
) -> AttemptEnd:
    """A failed attempt end that the core decided to dead-letter with ``dead_reason``
    (``None``: a ``DEAD`` decision without a reason, which storage records as ``fatal``)."""
    return AttemptEnd(
        ref=ref,
        outcome=outcome,
        reason=reason,
        error=error if error is not None else error_info(),
        decision=Decision(action=Action.DEAD, reason=dead_reason),
        mode=mode,
    )


def cancel_end(ref: LeaseRef, *, mode: str = "thread") -> AttemptEnd:
    """An attempt that stopped because its job was cancelled: ``CANCEL``."""
    return AttemptEnd(
        ref=ref,
        outcome=Outcome.CANCELLED,
        reason=Reason.CANCELLED.value,
        decision=Decision(action=Action.CANCEL),
        mode=mode,
    )


def timed_out_end(
    ref: LeaseRef,
    *,
    job_reason: str | None = Reason.TIMEOUT.value,
    reason: str | None = Reason.TIMEOUT.value,
    mode: str = "thread",
) -> AttemptEnd:
    """An attempt ended by its flow's deadline: ``TIME_OUT`` with ``job_reason`` as the
    decision's reason and ``reason`` as the attempt's (either may be ``None``)."""
    return AttemptEnd(
        ref=ref,
        outcome=Outcome.TIMED_OUT,
        reason=reason,
        decision=Decision(action=Action.TIME_OUT, reason=job_reason),
        mode=mode,
    )


def run_concurrently(
    n: int, fn: Callable[[int], T], *, timeout: float = 30.0
) -> list[T | BaseException]:
    """Run ``fn(i)`` for ``i in range(n)`` in ``n`` threads released together by a barrier.

    Returns each call's result or the exception it raised, by ``i``.
    """
    barrier = threading.Barrier(n)
    results: list[T | BaseException | None] = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait(timeout)
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
        assert not th.is_alive(), "a concurrent call did not return in time"
    return cast(list[T | BaseException], results)

"""The records ``memory://`` keeps: a job with its attempts, and a dead-letter entry.

Plain mutable dataclasses, changed only by the store and the parts under the store's
lock (:mod:`backends.memory.store`); each turns itself into the public record it stands
for (:class:`~queue_core.records.jobs.JobRecord`, ``AttemptRecord``, ``DeadJob``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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

__all__ = ["Attempt", "DeadEntry", "DeadKey", "Job", "ReadyEntry", "TimedEntry"]

ReadyEntry = tuple[int, int, int, int, str]
"""A ready job in its queue's heap: ``(-priority, order_at, seq, gen, job_id)``."""
TimedEntry = tuple[int, int, str]
"""An entry of a time-ordered heap: ``(time, gen or seq, id)``."""
DeadKey = tuple[int, int, str]
"""A dead-letter entry in the sorted indexes: ``(dead_at, seq, dead_id)``."""


@dataclass(slots=True)
class Attempt:
    """One attempt of a job."""

    number: int
    worker_id: str
    started_at: int
    outcome: Outcome | None = None
    reason: str | None = None
    error: ErrorInfo | None = None
    finished_at: int | None = None
    mode: str | None = None

    def record(self) -> AttemptRecord:
        err = self.error
        return AttemptRecord(
            number=self.number,
            outcome=self.outcome,
            reason=self.reason,
            error_class=err.error_class if err else None,
            error_type=err.error_type if err else None,
            message=err.message if err else None,
            traceback=err.traceback if err else None,
            worker_id=self.worker_id,
            started_at=dt_from_ms(self.started_at),
            finished_at=dt_from_ms(self.finished_at),
            mode=self.mode,
        )


@dataclass(slots=True)
class Job:
    """A stored job: its spec as enqueued and everything that changes after."""

    spec: NewJob
    seq: int
    state: JobState
    enqueued_at: int
    ready_at: int
    place_at: int | None = None
    """Its place in line when that is not ``ready_at``: a reaped job keeps the place it
    had (:func:`~queue_core.rules.outcomes.reap_place_at`) while its backoff delays its
    ready time. Set by a reap, reset by any other move to ``queued``."""
    reason: str | None = None
    lost_delay_ms: int = 0
    gen: int = 0
    """Changes with every state change: heap entries of an older ``gen`` are stale."""
    attempts: list[Attempt] = field(default_factory=list)
    result: bytes | None = None
    error: ErrorInfo | None = None
    finished_at: int | None = None
    lease_token: str | None = None
    lease_expires_at: int = 0
    deadline: int | None = None
    heartbeat_expires_at: int | None = None
    cancel_requested: bool = False
    dead_id: str | None = None
    ahead: bool = False
    """Its running attempt is held (claimed ahead of a free slot, its body not started):
    a reap spends no attempt (:func:`~queue_core.rules.outcomes.reap_verdict`)."""
    held_refunds: int = 0
    """How many of its held attempts a reap gave back unspent (bounded by the rule)."""

    @property
    def id(self) -> str:
        return self.spec.id

    def refund(self) -> None:
        """The attempt that ends spent none of the budget: ``max_attempts`` grows by one
        (a decision with ``spends_attempt=False``; a held attempt's reap)."""
        self.spec = replace(self.spec, max_attempts=self.spec.max_attempts + 1)

    @property
    def order_at(self) -> int:
        """The time claims order it by among ready jobs: its place in line."""
        return self.ready_at if self.place_at is None else self.place_at

    @property
    def attempt(self) -> int:
        return len(self.attempts)

    def record(self) -> JobRecord:
        s = self.spec
        return JobRecord(
            id=s.id,
            task_name=s.task_name,
            queue=s.queue,
            state=self.state,
            reason=self.reason,
            payload=s.payload,
            result=self.result,
            error=self.error,
            attempts=self.attempt,
            max_attempts=s.max_attempts,
            priority=s.priority,
            enqueued_at=self.enqueued_at,
            run_at=self.ready_at,
            started_at=self.attempts[-1].started_at if self.attempts else None,
            finished_at=self.finished_at,
            options=s.options,
            replay_of=s.replay_of,
            dead_id=self.dead_id,
            cancel_requested=self.cancel_requested,
            execution_id=s.execution_id,
            step_id=s.step_id,
        )


@dataclass(slots=True)
class DeadEntry:
    """A dead-letter entry."""

    id: str
    seq: int
    spec: NewJob
    """The job's spec as it was enqueued (attempt-1 ``lost_delay_ms``): what
    :func:`~queue_core.rules.outcomes.replay_job` replays."""
    error: ErrorInfo | None
    reason: str
    attempts: list[AttemptRecord]
    dead_at: int

    @property
    def key(self) -> DeadKey:
        return (self.dead_at, self.seq, self.id)

    def public(self) -> DeadJob:
        s = self.spec
        return DeadJob.build(
            id=self.id,
            job_id=s.id,
            task_name=s.task_name,
            queue=s.queue,
            payload=s.payload,
            error=self.error.message if self.error else None,
            error_class=self.error.error_class if self.error else None,
            reason=self.reason,
            attempts=self.attempts,
            dead_at_ms=self.dead_at,
            replay_of=s.replay_of,
        )

"""Flow and execution states, reasons and the public records of an execution (SPEC §7, and
the workflows of §12, which are executions too)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Final

from queue_core.records.base import _MappingMixin
from queue_core.records.jobs import AttemptRecord

__all__ = ["ExecutionInfo", "ExecutionReason", "ExecutionState", "StepRun", "StepState"]


class ExecutionState(str, Enum):
    """The state of a flow execution (SPEC §7)."""

    QUEUED = "queued"
    """Waiting for an execution ``concurrency`` slot (``behavior="queue"``)."""
    RUNNING = "running"
    WAITING = "waiting"
    """A workflow (SPEC §12) whose function is suspended: sleeping, waiting for an event
    or for its children. Active, like ``running``, for concurrency and the deadline."""
    CANCELLING = "cancelling"
    """Cancel requested: running steps are being stopped; no step starts."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """A step ended without succeeding (reason ``step_failed``)."""
    TIMED_OUT = "timed_out"
    """The execution ``timeout`` passed (reason ``flow_timeout``)."""
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    """Not run: a ``skip`` concurrency limit was reached at start (``concurrency_limit``)."""

    @property
    def finished(self) -> bool:
        """``True`` for the final states."""
        return self not in _ACTIVE_EXECUTION

    def __str__(self) -> str:
        return self.value


_ACTIVE_EXECUTION: Final = frozenset(
    {
        ExecutionState.QUEUED,
        ExecutionState.RUNNING,
        ExecutionState.WAITING,
        ExecutionState.CANCELLING,
    }
)


class StepState(str, Enum):
    """The state of one step of an execution: ``pending``, the job states of §5, ``not_run``."""

    PENDING = "pending"
    """Waiting for its dependencies or for a ``max_parallel`` place; no job exists yet."""
    QUEUED = "queued"
    """Its job is queued: ready, or waiting in a retry backoff."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    TIMED_OUT = "timed_out"
    """Stopped by the execution's deadline (attempt reason ``flow_timeout``)."""
    NOT_RUN = "not_run"
    """Its execution ended before it could start (or before its retry could)."""

    @property
    def finished(self) -> bool:
        """``True`` once the step can change no more."""
        return self not in _ACTIVE_STEP

    def __str__(self) -> str:
        return self.value


_ACTIVE_STEP: Final = frozenset({StepState.PENDING, StepState.QUEUED, StepState.RUNNING})


class ExecutionReason(str, Enum):
    """Why an execution (or a ``not_run`` step) ended as it did (SPEC §7)."""

    STEP_FAILED = "step_failed"
    FLOW_TIMEOUT = "flow_timeout"
    CANCELLED = "cancelled"
    CONCURRENCY_LIMIT = "concurrency_limit"
    SUPERSEDED = "superseded"
    """A newer execution with the same key took its place (``cancel_in_progress``: it ended
    ``cancelled``; ``latest``: the queued one ended ``skipped``), SPEC §13."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, kw_only=True, eq=True)
class ExecutionInfo(_MappingMixin):
    """One execution as ``queue.executions()`` lists it (SPEC §7); JSON uses these names."""

    id: str
    flow: str
    state: ExecutionState
    reason: ExecutionReason | None
    created_at: datetime
    started_at: datetime | None
    """When it left ``queued``; ``None`` while queued, or if it never started."""
    finished_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=True)
class StepRun(_MappingMixin):
    """One step of an execution (SPEC §7): ``execution.steps()`` returns these."""

    step_id: str
    state: StepState
    reason: str | None
    """The job's reason (``retries_exhausted``, ``fatal``, …), ``flow_timeout`` for a step
    stopped by the deadline, or for ``not_run`` the execution's reason."""
    job_id: str | None
    """``None`` while ``pending`` (no job exists before a step is ready)."""
    attempts: list[AttemptRecord] = field(default_factory=list)
    """Every attempt record of the step's job (SPEC §5), oldest first."""

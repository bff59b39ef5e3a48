"""The flow names :mod:`backends.sql.flows` and :mod:`backends.sql.flow_fast` use at run
time, imported by their functions when a flow operation first runs.

``SQLStorage`` has the flow operations as a base class, so those two modules load with
every SQL storage; they import the flow records and decisions (``queue_core.flows``,
about a third of the dataclasses ``queue_core`` defines) only through this module, so a
worker that never meets a flow never builds them (a worker's start-up is its imports).
"""

from __future__ import annotations

from queue_core.flows import decide
from queue_core.flows.decide import ExecutionSlot, ExecutionView, StepView, Transition
from queue_core.flows.decide_fast import ExecutionHead, StepIndex, step_ended_fast, step_index
from queue_core.flows.model import ConcurrencySpec, ExecutionReason, ExecutionState, StepState
from queue_core.flows.storage import ExecutionRecord, NewExecution, StepInputs, StepRecord

__all__ = [
    "BAD",
    "E",
    "S",
    "STEP_STATES",
    "ConcurrencySpec",
    "ExecutionHead",
    "ExecutionReason",
    "ExecutionRecord",
    "ExecutionSlot",
    "ExecutionState",
    "ExecutionView",
    "NewExecution",
    "StepIndex",
    "StepInputs",
    "StepRecord",
    "StepState",
    "StepView",
    "Transition",
    "decide",
    "reason_of",
    "step_ended_fast",
    "step_index",
]

E = ExecutionState
S = StepState
STEP_STATES = {s.value: s for s in StepState}
"""Step states by value (a dict lookup: ``StepState(value)`` costs ~7 us, per step per
event)."""
BAD = frozenset({S.TIMED_OUT, S.DEAD, S.CANCELLED, S.SKIPPED, S.NOT_RUN})
"""States counted in ``n_bad``: any of them takes an execution off the fast path."""


def reason_of(value: str | None) -> ExecutionReason | None:
    """An execution row's ``reason`` column as the enum."""
    return ExecutionReason(value) if value is not None else None

"""The flow names :mod:`backends.redis.flows`, :mod:`backends.redis.flow_records` and
:mod:`backends.redis.flow_fast` use at run time, imported by their functions when a flow
operation first runs.

``RedisStorage`` has the flow operations as a base class and imports
``flow_records``, so those modules load with every Redis storage; they import the flow
records and decisions (``queue_core.flows``) only through this module, so a worker that
never meets a flow never builds them (a worker's start-up is its imports).
"""

from __future__ import annotations

from queue_core.flows import decide
from queue_core.flows.decide import ExecutionSlot, ExecutionView, StepView, Transition
from queue_core.flows.decide_fast import (
    ExecutionHead,
    StepIndex,
    advance_idle,
    step_ended_fast,
    step_index,
)
from queue_core.flows.model import ConcurrencySpec, ExecutionReason, ExecutionState, StepState
from queue_core.flows.storage import (
    ExecutionRecord,
    NewExecution,
    StepInputs,
    StepRecord,
    step_job_id,
)

__all__ = [
    "COUNTED",
    "E",
    "FAST_HEAD",
    "S",
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
    "advance_idle",
    "decide",
    "step_ended_fast",
    "step_index",
    "step_job_id",
]

E = ExecutionState
S = StepState
COUNTED = (S.SUCCEEDED, S.TIMED_OUT, S.DEAD, S.CANCELLED, S.SKIPPED, S.NOT_RUN)
"""The end states ``flow_fast`` counts."""
FAST_HEAD = ["st", "rs", "fs", "mp", "dl", "ck", "v", "sp", "c.pending"]
FAST_HEAD += [f"c.{s.value}" for s in COUNTED]
"""The execution hash fields ``flow_fast`` reads."""

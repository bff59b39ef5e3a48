"""What the SQL backend adds to the durable contract: a child stored ``skipped`` by its
task's ``skip`` concurrency limit ends its step at once (SQLite and PostgreSQL)."""

from __future__ import annotations

from dataclasses import replace

from backends.sql import SQLStorage
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState
from queue_core.records.workflows import Suspension
from queue_core.testing import T0
from queue_core.testing.suite._durable_base import (
    child,
    child_memo,
    claim_function,
    make_workflow,
    state_of,
    suspended,
)


def test_a_child_over_its_skip_limit_ends_its_step_skipped(storage: SQLStorage) -> None:
    new = make_workflow()
    storage.start_execution(new, now=T0)
    fn = claim_function(storage, new.id, T0 + 1)
    assert fn is not None
    kids = tuple(child(new.id, i + 1, i) for i in range(2))
    limited = tuple(
        replace(k, job=replace(k.job, concurrency_key="k", concurrency_limit=1,
                               concurrency_skip=True))
        for k in kids
    )  # fmt: skip
    stop = Suspension(
        ready_at=None,
        memos=tuple(child_memo(i, i + 1) for i in range(2)),
        children=limited,
        awaiting=(1, 2),
        reason="children",
    )
    assert storage.finish([suspended(fn.ref, stop)], now=T0 + 2) == [True]
    state = state_of(storage, new.id)
    assert [s.state for s in state.steps] == [StepState.QUEUED, StepState.QUEUED, StepState.SKIPPED]
    assert (state.jobs[1].state, state.jobs[2].state) == (JobState.QUEUED, JobState.SKIPPED)
    assert (state.execution.state, state.execution.awaiting) == (ExecutionState.WAITING, (1,))

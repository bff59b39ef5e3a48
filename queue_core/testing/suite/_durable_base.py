"""Builders the durable-workflow contract tests share (``SupportsWorkflows``)."""

from __future__ import annotations

import json

import pytest

from queue_core.records.jobs import Action, ClaimedJob, Decision, LeaseRef, NewJob, Outcome
from queue_core.records.workflows import (
    FUNCTION_STEP,
    EventWait,
    MemoPut,
    NewChild,
    SuspendedEnd,
    Suspension,
)
from queue_core.rules.flows.spec import ConcurrencySpec, FlowSpec, StepSpec
from queue_core.storage.abilities import SupportsWorkflows
from queue_core.storage.flows import NewExecution, step_job_id
from queue_core.storage.protocol import Storage
from queue_core.storage.workflows import WorkflowState, sub_execution_id
from queue_core.testing.fixtures import LEASE, new_id, new_job
from queue_core.testing.suite._base import lacks

__all__ = [
    "child",
    "child_memo",
    "claim_function",
    "event_wait",
    "make_workflow",
    "memos_of",
    "state_of",
    "sub_flow",
    "suspended",
    "workflows_of",
]


def workflows_of(storage: Storage) -> SupportsWorkflows:
    """The storage as :class:`SupportsWorkflows`; the test skips, naming it, when it lacks it."""
    if not isinstance(storage, SupportsWorkflows):
        pytest.skip(lacks(SupportsWorkflows))
    return storage


def make_workflow(
    *,
    timeout_ms: int | None = None,
    concurrency: ConcurrencySpec | None = None,
    max_attempts: int = 1,
    name: str = "contract-workflow",
) -> NewExecution:
    """A workflow execution: its one function step ``main``, whose job is ``tests.workflow``."""
    spec = FlowSpec(
        name=name,
        kind="workflow",
        steps=(StepSpec(id=FUNCTION_STEP, kind="code", task="tests.workflow"),),
        timeout_ms=timeout_ms,
        concurrency=concurrency,
    )
    eid = new_id()
    job = new_job(
        id=step_job_id(eid, 0),
        task_name="tests.workflow",
        execution_id=eid,
        step_id=FUNCTION_STEP,
        max_attempts=max_attempts,
    )
    return NewExecution.build(id=eid, spec=spec, input=b"null", jobs=[job])


def sub_flow(parent_id: str, idx: int) -> NewExecution:
    """A one-step flow (step ``a``) started as step ``idx`` of workflow ``parent_id``."""
    spec = FlowSpec(name="contract-sub", steps=(StepSpec(id="a", kind="code", task="tests.a"),))
    eid = sub_execution_id(parent_id, idx)
    job = new_job(id=step_job_id(eid, 0), task_name="tests.a", execution_id=eid, step_id="a")
    return NewExecution.build(id=eid, spec=spec, input=b"1", jobs=[job], parent=(parent_id, idx))


def child(execution_id: str, idx: int, n: int, *, max_attempts: int = 1) -> NewChild:
    """The ``n``-th child (``ctx.run``) of a workflow, as its step ``idx``."""
    step_id = f"tests.child#{n}"
    job: NewJob = new_job(
        id=step_job_id(execution_id, idx),
        task_name="tests.child",
        execution_id=execution_id,
        step_id=step_id,
        max_attempts=max_attempts,
    )
    return NewChild(idx, step_id, job)


def child_memo(n: int, idx: int) -> MemoPut:
    """The ``c:<n>`` memo naming child ``n``'s step index."""
    return MemoPut(f"c:{n}", json.dumps({"idx": idx}).encode())


def event_wait(
    n: int, name: str, *, key: str | None = None, since: int, until: int | None = None
) -> EventWait:
    """The ``n``-th event wait of a function (its data memo ``d:<n>``)."""
    return EventWait(memo_key=f"d:{n}", name=name, key=key, since=since, until=until)


def suspended(ref: LeaseRef, suspension: Suspension) -> SuspendedEnd:
    """The end of a function step's attempt that stopped to wait (spends no attempt)."""
    return SuspendedEnd(
        ref=ref,
        outcome=Outcome.SUSPENDED,
        reason=suspension.reason,
        decision=Decision(action=Action.RETRY, spends_attempt=False),
        mode="async",
        suspension=suspension,
    )


def claim_function(storage: Storage, execution_id: str, now: int) -> ClaimedJob | None:
    """Claim from ``default`` at ``now``; the function step's job of ``execution_id`` if it
    was among the claimed jobs (others claimed stay claimed)."""
    got = storage.claim("w", ["default"], 20, LEASE, now=now)
    fn = step_job_id(execution_id, 0)
    return next((c for c in got if c.id == fn), None)


def state_of(flows: SupportsWorkflows, execution_id: str) -> WorkflowState:
    """``workflow_state``, which must exist."""
    state = flows.workflow_state(execution_id)
    assert state is not None, f"execution {execution_id} not found"
    return state


def memos_of(flows: SupportsWorkflows, execution_id: str) -> dict[str, bytes]:
    """``{memo key: value}`` of the execution."""
    return {k: m.value for k, m in state_of(flows, execution_id).memos.items()}

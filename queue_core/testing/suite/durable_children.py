"""Contract: a workflow's children and sub-executions, its end, its deadline and its cancel
(``SupportsWorkflows``, SPEC §12). Part of :class:`~.durable.DurableContract`."""

from __future__ import annotations

import pytest

from queue_core.records.errors import LeaseLost, StorageError
from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome
from queue_core.records.workflows import Suspension
from queue_core.rules.leases import REAP_MARGIN_MS as MARGIN
from queue_core.storage.flows import NewExecution, step_job_id
from queue_core.storage.protocol import Storage
from queue_core.storage.workflows import sub_execution_id
from queue_core.testing.fixtures import DAY, MIN, T0, cancel_end, complete_end, dead_end
from queue_core.testing.suite._base import ContractBase, job_of
from queue_core.testing.suite._durable_base import (
    child,
    child_memo,
    claim_function,
    make_workflow,
    memos_of,
    state_of,
    sub_flow,
    suspended,
    workflows_of,
)
from queue_core.testing.suite._flows_base import claim_steps

__all__ = ["WorkflowChildrenContract"]

_E = ExecutionState
_S = StepState


def _with_children(
    storage: Storage,
    n: int,
    *,
    awaiting: tuple[int, ...] | None = None,
    timeout_ms: int = 0,
    ready_at: int | None = None,
) -> str:
    """A workflow whose function added ``n`` children (steps 1..n) and waits for
    ``awaiting`` (default: all of them), suspended at ``T0 + 2`` (until ``ready_at``)."""
    flows = workflows_of(storage)
    new = make_workflow(timeout_ms=timeout_ms or None)
    flows.start_execution(new, now=T0)
    fn = claim_function(storage, new.id, T0 + 1)
    assert fn is not None
    kids = tuple(child(new.id, i + 1, i) for i in range(n))
    stop = Suspension(
        ready_at=ready_at,
        memos=tuple(child_memo(i, i + 1) for i in range(n)),
        children=kids,
        awaiting=tuple(range(1, n + 1)) if awaiting is None else awaiting,
        reason="children",
    )
    assert storage.finish([suspended(fn.ref, stop)], now=T0 + 2) == [True]
    return new.id


def _waiting_on_a_sub_flow(storage: Storage) -> tuple[NewExecution, NewExecution]:
    """A workflow (started at ``T0``) whose function started one sub-flow and suspended
    awaiting it (``T0 + 3``): the parent and the sub-execution."""
    flows = workflows_of(storage)
    parent = make_workflow()
    flows.start_execution(parent, now=T0)
    fn = claim_function(storage, parent.id, T0 + 1)
    assert fn is not None
    sub = sub_flow(parent.id, 1)
    flows.start_child_execution(fn.ref, sub, "sub#0", "c:0", now=T0 + 2)
    storage.finish([suspended(fn.ref, Suspension(ready_at=None, awaiting=(1,)))], now=T0 + 3)
    return parent, sub


class WorkflowChildrenContract(ContractBase):
    """Children added at run time, the wake-up on the last awaited end, sub-executions."""

    def test_the_last_awaited_child_end_wakes_the_function(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        eid = _with_children(storage, 2)
        state = state_of(flows, eid)
        assert [(s.idx, s.step_id, s.state, s.job_id) for s in state.steps] == [
            (0, "main", _S.QUEUED, step_job_id(eid, 0)),
            (1, "tests.child#0", _S.QUEUED, step_job_id(eid, 1)),
            (2, "tests.child#1", _S.QUEUED, step_job_id(eid, 2)),
        ]
        assert state.execution.state is _E.WAITING
        assert state.execution.awaiting == (1, 2)
        assert sorted(memos_of(flows, eid)) == ["c:0", "c:1"]
        kids = claim_steps(storage, T0 + 3)
        assert sorted(kids) == ["tests.child#0", "tests.child#1"]  # not the parked function
        storage.finish([complete_end(kids["tests.child#0"].ref, b'"one"')], now=T0 + 4)
        assert state_of(flows, eid).execution.awaiting == (2,)
        assert claim_function(storage, eid, T0 + 5) is None
        storage.finish([dead_end(kids["tests.child#1"].ref)], now=T0 + 6)
        state = state_of(flows, eid)
        assert (state.execution.state, state.execution.awaiting) == (_E.WAITING, ())
        assert state.jobs[1].result == b'"one"'
        assert (state.jobs[2].state, state.jobs[2].dead_id is not None) == (JobState.DEAD, True)
        assert claim_function(storage, eid, T0 + 6) is not None  # a dead child fails nothing
        assert state_of(flows, eid).execution.state is _E.RUNNING

    def test_awaited_children_that_already_ended_ready_the_function_at_once(
        self, storage: Storage
    ) -> None:
        flows = workflows_of(storage)
        eid = _with_children(storage, 2, awaiting=(1,))
        kids = claim_steps(storage, T0 + 3)
        storage.finish([complete_end(kids["tests.child#0"].ref)], now=T0 + 4)
        fn = claim_function(storage, eid, T0 + 5)
        assert fn is not None
        storage.finish([complete_end(kids["tests.child#1"].ref)], now=T0 + 6)
        stop = Suspension(ready_at=None, awaiting=(2,), reason="children")
        storage.finish([suspended(fn.ref, stop)], now=T0 + 7)
        assert claim_function(storage, eid, T0 + 7) is not None
        assert state_of(flows, eid).execution.awaiting == ()

    def test_the_function_s_end_ends_the_workflow(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        eid = _with_children(storage, 1, awaiting=(), ready_at=T0 + 2)  # started, not awaited
        claimed = claim_steps(storage, T0 + 3)
        fn, kid = claimed["main"], claimed["tests.child#0"]
        storage.finish([complete_end(fn.ref, b'"result"')], now=T0 + 4)
        record = flows.get_execution(eid)
        assert record is not None
        assert (record.state, record.reason, record.finished_at) == (_E.SUCCEEDED, None, T0 + 4)
        assert job_of(storage, fn.id).result == b'"result"'
        assert job_of(storage, kid.id).state is JobState.RUNNING  # an unawaited child runs on
        storage.finish([dead_end(kid.ref)], now=T0 + 6)
        record = flows.get_execution(eid)
        assert record is not None and record.state is _E.SUCCEEDED

    def test_a_dead_function_fails_the_workflow_naming_it(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        storage.finish([dead_end(fn.ref)], now=T0 + 2)
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.reason, record.failed_step) == (
            _E.FAILED,
            ExecutionReason.STEP_FAILED,
            "main",
        )

    def test_a_sub_execution_end_wakes_its_parent(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        parent = make_workflow()
        flows.start_execution(parent, now=T0)
        fn = claim_function(storage, parent.id, T0 + 1)
        assert fn is not None
        sub = sub_flow(parent.id, 1)
        state = flows.start_child_execution(fn.ref, sub, "sub#0", "c:0", now=T0 + 2)
        assert state is _E.RUNNING
        steps = state_of(flows, parent.id).steps
        assert [(s.idx, s.step_id, s.state, s.job_id) for s in steps] == [
            (0, "main", _S.RUNNING, step_job_id(parent.id, 0)),
            (1, "sub#0", _S.RUNNING, None),
        ]
        assert "c:0" in memos_of(flows, parent.id)
        sub_record = flows.get_execution(sub.id)
        assert sub_record is not None and sub_record.parent_id == parent.id
        stop = Suspension(ready_at=None, awaiting=(1,), reason="children")
        storage.finish([suspended(fn.ref, stop)], now=T0 + 3)
        step = claim_steps(storage, T0 + 4)["a"]
        storage.finish([complete_end(step.ref, b'"A"')], now=T0 + 5)
        sub_record = flows.get_execution(sub.id)
        assert sub_record is not None and sub_record.state is _E.SUCCEEDED
        assert [s.state for s in state_of(flows, parent.id).steps] == [_S.QUEUED, _S.SUCCEEDED]
        assert claim_function(storage, parent.id, T0 + 5) is not None  # woken by the sub's end

    def test_a_sub_execution_is_fenced_and_takes_the_next_index(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        parent = make_workflow()
        flows.start_execution(parent, now=T0)
        fn = claim_function(storage, parent.id, T0 + 1)
        assert fn is not None
        with pytest.raises(StorageError):
            flows.start_child_execution(fn.ref, sub_flow(parent.id, 2), "sub#0", "c:0", now=T0 + 2)
        storage.finish([complete_end(fn.ref)], now=T0 + 3)
        with pytest.raises(LeaseLost):
            flows.start_child_execution(fn.ref, sub_flow(parent.id, 1), "sub#0", "c:0", now=T0 + 4)
        assert flows.get_execution(sub_execution_id(parent.id, 1)) is None
        assert [s.idx for s in state_of(flows, parent.id).steps] == [0]

    def test_cancel_reaches_children_and_sub_executions(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        eid = _with_children(storage, 1)
        fn_id = step_job_id(eid, 0)
        kid = claim_steps(storage, T0 + 3)["tests.child#0"]
        assert flows.cancel_execution(eid, now=T0 + 4) is _E.CANCELLING
        assert job_of(storage, fn_id).state is JobState.CANCELLED  # the parked function
        assert job_of(storage, kid.id).cancel_requested
        storage.finish([cancel_end(kid.ref)], now=T0 + 5)
        record = flows.get_execution(eid)
        assert record is not None
        assert (record.state, record.reason) == (_E.CANCELLED, ExecutionReason.CANCELLED)

    def test_cancel_reaches_a_running_sub_execution(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        parent, sub = _waiting_on_a_sub_flow(storage)
        step = claim_steps(storage, T0 + 4)["a"]
        assert flows.cancel_execution(parent.id, now=T0 + 5) is _E.CANCELLING
        sub_record = flows.get_execution(sub.id)
        assert sub_record is not None and sub_record.state is _E.CANCELLING
        storage.finish([cancel_end(step.ref)], now=T0 + 6)
        for eid in (sub.id, parent.id):
            record = flows.get_execution(eid)
            assert record is not None and record.state is _E.CANCELLED, eid

    def test_cancel_ends_an_idle_sub_execution_and_its_parent_at_once(
        self, storage: Storage
    ) -> None:
        """A waiting parent whose sub-execution runs no step: the cancel ends the
        sub-execution at once, whose end then ends the parent's step and the parent."""
        flows = workflows_of(storage)
        parent, sub = _waiting_on_a_sub_flow(storage)
        flows.cancel_execution(parent.id, now=T0 + 4)
        for eid in (sub.id, parent.id):
            record = flows.get_execution(eid)
            assert record is not None
            ended = (record.state, record.reason, record.finished_at)
            assert ended == (_E.CANCELLED, ExecutionReason.CANCELLED, T0 + 4), eid
        steps = [(s.state, s.reason) for s in flows.list_steps(parent.id)]
        assert steps == [(_S.NOT_RUN, "cancelled"), (_S.CANCELLED, "cancelled")]
        assert [(s.state, s.reason) for s in flows.list_steps(sub.id)] == [
            (_S.NOT_RUN, "cancelled")
        ]
        assert job_of(storage, step_job_id(sub.id, 0)).state is JobState.CANCELLED
        assert claim_steps(storage, T0 + 5) == {}

    def test_a_waiting_workflow_times_out_at_its_deadline_without_a_worker(
        self, storage: Storage
    ) -> None:
        flows = workflows_of(storage)
        eid = _with_children(storage, 1, timeout_ms=MIN)
        kid = claim_steps(storage, T0 + 3)["tests.child#0"]
        storage.renew([kid.ref], 10 * MIN, now=T0 + 4)  # its worker is alive
        assert storage.reap(now=T0 + MIN - 1) == []
        reaped = storage.reap(now=T0 + MIN + MARGIN)
        assert [(r.job_id, r.outcome, r.reason) for r in reaped] == [
            (kid.id, Outcome.TIMED_OUT, "flow_timeout")
        ]
        record = flows.get_execution(eid)
        assert record is not None
        assert (record.state, record.reason) == (_E.TIMED_OUT, ExecutionReason.FLOW_TIMEOUT)
        assert job_of(storage, step_job_id(eid, 0)).state is JobState.CANCELLED
        assert [s.state for s in flows.list_steps(eid)] == [_S.NOT_RUN, _S.TIMED_OUT]
        assert claim_function(storage, eid, T0 + DAY) is None

"""Contract: resuming executions -- ``retry()``, ``replay(step)`` and ``retry_dead`` of a
step's dead letter, for flows and workflows -- and the retention of a workflow's memos,
events, children and sub-executions (``SupportsWorkflows``, SPEC §12). Part of
:class:`~.durable.DurableContract`."""

from __future__ import annotations

import pytest

from queue_core.records.errors import ConfigError, NotFound
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome, dt_from_ms
from queue_core.records.workflows import MemoPut, Suspension
from queue_core.storage.flows import step_job_id
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import HOUR, MIN, T0, complete_end, dead_end
from queue_core.testing.suite._base import ContractBase, StorageWithRetention, job_of
from queue_core.testing.suite._durable_base import (
    child,
    child_memo,
    claim_function,
    event_wait,
    make_workflow,
    memos_of,
    state_of,
    sub_flow,
    suspended,
    workflows_of,
)
from queue_core.testing.suite._flows_base import claim_steps, make_execution, make_spec, states

__all__ = ["ResumeContract"]

_E = ExecutionState
_S = StepState


class ResumeContract(ContractBase):
    """``resume_execution`` and ``retry_dead`` of a step's entry; workflow retention."""

    def _failed_flow(self, storage: Storage) -> tuple[str, str]:
        """A flow ``a -> b`` (deadline 1 h) whose ``a`` succeeded and ``b`` died: its id and
        ``b``'s job id."""
        flows = workflows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"]}, timeout_ms=HOUR))
        flows.start_execution(new, now=T0)
        storage.finish([complete_end(claim_steps(storage, T0 + 1)["a"].ref, b'"A"')], now=T0 + 2)
        b = claim_steps(storage, T0 + 3)["b"]
        storage.finish([dead_end(b.ref)], now=T0 + 4)
        record = flows.get_execution(new.id)
        assert record is not None and record.state is _E.FAILED
        return new.id, b.id

    def test_retry_resumes_a_failed_flow_from_its_failed_step(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        eid, b_id = self._failed_flow(storage)
        dead_id = job_of(storage, b_id).dead_id
        assert flows.resume_execution(eid, now=T0 + MIN) is _E.RUNNING
        record = flows.get_execution(eid)
        assert record is not None
        assert (record.reason, record.failed_step, record.finished_at) == (None, None, None)
        assert (record.started_at, record.deadline_at) == (T0 + MIN, T0 + MIN + HOUR)
        assert states(flows, eid) == {"a": _S.SUCCEEDED, "b": _S.QUEUED}
        job = job_of(storage, b_id)
        assert (job.state, job.attempts, job.max_attempts) == (JobState.QUEUED, 1, 2)
        assert dead_id is not None and storage.get_dead(dead_id) is None
        b = claim_steps(storage, T0 + MIN + 1)["b"]
        assert b.attempt == 2
        assert flows.get_step_inputs(eid, "b").results == {"a": b'"A"'}
        storage.finish([complete_end(b.ref)], now=T0 + MIN + 2)
        record = flows.get_execution(eid)
        assert record is not None and record.state is _E.SUCCEEDED
        assert [a.number for a in storage.list_attempts(b_id)] == [1, 2]

    def test_a_step_run_again_is_pruned_by_its_last_end_only(
        self, storage_with_retention: StorageWithRetention
    ) -> None:
        """A resumed step's first end no longer counts for the retention: a prune after
        the retry keeps the queued job (and its count); its second end is pruned once."""
        storage = storage_with_retention("0")
        eid, b_id = self._failed_flow(storage)
        assert workflows_of(storage).resume_execution(eid, now=T0 + MIN) is _E.RUNNING
        storage.prune(now=T0 + MIN + 1)
        assert job_of(storage, b_id).state is JobState.QUEUED
        [queue] = storage.stats(now=T0 + MIN + 1)
        assert (queue.ready, queue.dead) == (1, 0)
        storage.finish(
            [complete_end(claim_steps(storage, T0 + MIN + 2)["b"].ref)], now=T0 + MIN + 3
        )
        while storage.prune(now=T0 + MIN + 4):
            pass
        assert storage.get_job(b_id) is None
        assert storage.stats(now=T0 + MIN + 4) == []

    def test_retry_refuses_an_execution_that_did_not_fail(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        new = make_execution(make_spec({"a": []}))
        flows.start_execution(new, now=T0)
        with pytest.raises(ConfigError) as running:
            flows.resume_execution(new.id, now=T0 + 1)
        assert running.value.code == "invalid_option"
        storage.finish([complete_end(claim_steps(storage, T0 + 2)["a"].ref)], now=T0 + 3)
        with pytest.raises(ConfigError) as succeeded:
            flows.resume_execution(new.id, now=T0 + 4)
        assert succeeded.value.code == "invalid_option"
        with pytest.raises(NotFound):
            flows.resume_execution("nope", now=T0 + 5)
        record = flows.get_execution(new.id)
        assert record is not None and record.state is _E.SUCCEEDED

    def test_replay_reruns_a_step_and_its_dependents(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        new = make_execution(make_spec({"a": [], "b": ["a"], "c": []}))
        flows.start_execution(new, now=T0)
        for step in claim_steps(storage, T0 + 1).values():
            storage.finish([complete_end(step.ref)], now=T0 + 2)
        storage.finish([complete_end(claim_steps(storage, T0 + 3)["b"].ref)], now=T0 + 4)
        with pytest.raises(ConfigError) as unknown:
            flows.resume_execution(new.id, "zz", now=T0 + 5)
        assert (unknown.value.code, unknown.value.field) == ("invalid_option", "step_id")
        assert flows.resume_execution(new.id, "a", now=T0 + 6) is _E.RUNNING
        assert states(flows, new.id) == {"a": _S.QUEUED, "b": _S.PENDING, "c": _S.SUCCEEDED}
        again = claim_steps(storage, T0 + 7)["a"]
        storage.finish([complete_end(again.ref)], now=T0 + 8)
        attempts = storage.list_attempts(again.id)  # the first run's success is kept
        assert [(a.number, a.outcome) for a in attempts] == [
            (1, Outcome.SUCCEEDED),
            (2, Outcome.SUCCEEDED),
        ]
        ends = [(T0 + 1, T0 + 2), (T0 + 7, T0 + 8)]
        assert [(a.started_at, a.finished_at) for a in attempts] == [
            (dt_from_ms(s), dt_from_ms(f)) for s, f in ends
        ]
        assert states(flows, new.id)["b"] is _S.QUEUED
        storage.finish([complete_end(claim_steps(storage, T0 + 9)["b"].ref)], now=T0 + 10)
        record = flows.get_execution(new.id)
        assert record is not None and record.state is _E.SUCCEEDED

    def test_retry_dead_of_a_step_resumes_its_execution(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        eid, b_id = self._failed_flow(storage)
        dead_id = job_of(storage, b_id).dead_id
        assert dead_id is not None
        assert storage.retry_dead(dead_id, now=T0 + MIN) == b_id
        assert storage.get_dead(dead_id) is None
        record = flows.get_execution(eid)
        assert record is not None and record.state is _E.RUNNING
        assert job_of(storage, b_id).state is JobState.QUEUED

    def _workflow_with_memos(self, storage: Storage, end: str) -> tuple[str, str]:
        """A workflow whose function stored memos ``s:a``, ``s:b``, ``s:c`` and then
        ``end``-ed (``complete`` or ``dead``): its id and the function job's id."""
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        for i, key in enumerate(("s:a", "s:b", "s:c")):
            flows.put_memo(fn.ref, new.id, key, b"1", now=T0 + 2 + i)
        last = complete_end(fn.ref) if end == "complete" else dead_end(fn.ref)
        storage.finish([last], now=T0 + 9)
        return new.id, fn.id

    def test_retry_resumes_a_failed_workflow_keeping_its_memos(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        eid, fn_id = self._workflow_with_memos(storage, "dead")
        assert flows.resume_execution(eid, now=T0 + MIN) is _E.RUNNING
        assert sorted(memos_of(flows, eid)) == ["s:a", "s:b", "s:c"]
        job = job_of(storage, fn_id)
        assert (job.state, job.max_attempts) == (JobState.QUEUED, 2)
        assert claim_function(storage, eid, T0 + MIN) is not None

    def test_replay_of_a_workflow_step_drops_its_memo_and_later_ones(
        self, storage: Storage
    ) -> None:
        flows = workflows_of(storage)
        eid, fn_id = self._workflow_with_memos(storage, "complete")
        with pytest.raises(ConfigError):
            flows.resume_execution(eid, "zz", now=T0 + MIN)
        assert flows.resume_execution(eid, "b", now=T0 + MIN) is _E.RUNNING
        assert sorted(memos_of(flows, eid)) == ["s:a"]
        fn = claim_function(storage, eid, T0 + MIN + 1)
        assert fn is not None
        storage.finish([complete_end(fn.ref)], now=T0 + MIN + 2)
        assert flows.resume_execution(eid, "main", now=T0 + MIN + 3) is _E.RUNNING
        assert memos_of(flows, eid) == {}

    def test_retry_reruns_a_dead_child(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        stop = Suspension(
            ready_at=None, children=(child(new.id, 1, 0),), memos=(child_memo(0, 1),),
            awaiting=(1,),
        )  # fmt: skip
        storage.finish([suspended(fn.ref, stop)], now=T0 + 2)
        storage.finish([dead_end(claim_steps(storage, T0 + 3)["tests.child#0"].ref)], now=T0 + 4)
        fn = claim_function(storage, new.id, T0 + 5)
        assert fn is not None
        storage.finish([dead_end(fn.ref)], now=T0 + 6)  # the function raised ChildFailed
        assert flows.resume_execution(new.id, now=T0 + MIN) is _E.RUNNING
        assert [s.state for s in flows.list_steps(new.id)] == [_S.QUEUED, _S.QUEUED]
        assert job_of(storage, step_job_id(new.id, 1)).max_attempts == 2

    def test_retention_prunes_a_workflow_with_its_memos_events_and_children(
        self, storage_with_retention: StorageWithRetention
    ) -> None:
        storage = storage_with_retention("0")
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        sub = sub_flow(new.id, 1)
        flows.start_child_execution(fn.ref, sub, "sub#0", "c:0", now=T0 + 2)
        stop = Suspension(
            ready_at=None,
            memos=(child_memo(1, 2),),
            children=(child(new.id, 2, 1),),
            awaiting=(1, 2),
        )
        storage.finish([suspended(fn.ref, stop)], now=T0 + 3)
        for step in claim_steps(storage, T0 + 4).values():  # the child and the sub's step
            storage.finish([complete_end(step.ref)], now=T0 + 5)
        fn = claim_function(storage, new.id, T0 + 6)
        assert fn is not None
        wait = Suspension(
            ready_at=None, memos=(MemoPut("e:0", b"{}"),), wait=event_wait(0, "go", since=T0 + 6)
        )
        storage.finish([suspended(fn.ref, wait)], now=T0 + 6)
        assert flows.send_event("go", None, b"1", now=T0 + 7) == 1
        fn = claim_function(storage, new.id, T0 + 7)
        assert fn is not None
        storage.finish([complete_end(fn.ref)], now=T0 + 8)
        record = flows.get_execution(new.id)
        assert record is not None and record.state is _E.SUCCEEDED
        assert storage.prune(now=T0 + 9) >= 3
        assert flows.workflow_state(new.id) is None
        assert flows.get_execution(sub.id) is None
        for idx in range(3):
            assert storage.get_job(step_job_id(new.id, idx)) is None
        later = make_workflow()  # the pruned event is not delivered to a wait since before it
        flows.start_execution(later, now=T0 + 10)
        fn = claim_function(storage, later.id, T0 + 11)
        assert fn is not None
        parked = Suspension(ready_at=None, wait=event_wait(0, "go", since=T0))
        storage.finish([suspended(fn.ref, parked)], now=T0 + 12)
        assert "d:0" not in state_of(flows, later.id).memos

    def test_a_waiting_workflow_keeps_its_finished_children_past_the_retention(
        self, storage_with_retention: StorageWithRetention
    ) -> None:
        """A child's result, state and dead letter are the function's to read on its next
        run: they go with their execution, not with the retention of jobs."""
        storage = storage_with_retention("0")
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        stop = Suspension(
            ready_at=None,
            memos=(child_memo(0, 1), child_memo(1, 2)),
            children=(child(new.id, 1, 0), child(new.id, 2, 1)),
            awaiting=(1,),
        )
        storage.finish([suspended(fn.ref, stop)], now=T0 + 2)
        kids = claim_steps(storage, T0 + 3)
        storage.finish([complete_end(kids["tests.child#0"].ref, b'"kept"')], now=T0 + 4)
        storage.finish([dead_end(kids["tests.child#1"].ref)], now=T0 + 5)
        storage.prune(now=T0 + HOUR)
        state = state_of(flows, new.id)
        assert state.jobs[1].result == b'"kept"'
        assert state.jobs[2].state is JobState.DEAD

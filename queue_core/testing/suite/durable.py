"""Contract: durable workflows (``SupportsWorkflows``, SPEC §12) -- memos, suspensions and
events. :class:`DurableContract` gathers every workflow mixin (children and sub-executions
in :mod:`.durable_children`, retry and replay in :mod:`.resume`).

Every test skips naming ``SupportsWorkflows`` on a storage without the ability. The
function step's job is claimed and finished by the test as a worker would (a
:class:`~queue_core.records.workflows.SuspendedEnd` when it stops to wait); times are
explicit, nothing sleeps.
"""

from __future__ import annotations

import json
import os

import pytest

from queue_core.records.errors import LeaseLost
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome
from queue_core.records.workflows import PARKED_AT, MemoPut, Suspension
from queue_core.storage.flows import step_job_id
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import DAY, HOUR, LEASE, MIN, SEC, T0, complete_end
from queue_core.testing.suite._base import ContractBase, job_of, result_size
from queue_core.testing.suite._durable_base import (
    claim_function,
    event_wait,
    make_workflow,
    memos_of,
    state_of,
    suspended,
    workflows_of,
)
from queue_core.testing.suite.durable_children import WorkflowChildrenContract
from queue_core.testing.suite.resume import ResumeContract

__all__ = ["DurableContract", "WorkflowEventContract", "WorkflowSuspendContract"]

_E = ExecutionState
_S = StepState


def _wait_meta(since: int, until: int | None) -> MemoPut:
    return MemoPut("e:0", json.dumps({"since": since, "until": until}).encode())


class WorkflowSuspendContract(ContractBase):
    """Starting a workflow, memos, and a suspension that spends no attempt."""

    def test_a_workflow_starts_its_function_step(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        new = make_workflow(timeout_ms=HOUR)
        assert flows.start_execution(new, now=T0) is _E.RUNNING
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.kind, record.deadline_at, record.spec().kind) == (
            "workflow",
            T0 + HOUR,
            "workflow",
        )
        state = state_of(flows, new.id)
        assert [(s.idx, s.step_id, s.state) for s in state.steps] == [(0, "main", _S.QUEUED)]
        assert state.memos == {}
        assert state.jobs[0].id == step_job_id(new.id, 0)
        assert state.jobs[0].state is JobState.QUEUED
        assert flows.workflow_state("nope") is None

    def test_a_memo_is_stored_fenced_and_read_back(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        new = make_workflow(max_attempts=2)
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        flows.put_memo(fn.ref, new.id, "s:a", b'"A"', now=T0 + 2)
        flows.put_memo(fn.ref, new.id, "s:b", b'"B"', now=T0 + 3)
        flows.put_memo(fn.ref, new.id, "s:a", b'"A2"', now=T0 + 4)  # replaced: same number
        memos = state_of(flows, new.id).memos
        assert {k: (m.value, m.seq, m.at) for k, m in memos.items()} == {
            "s:a": (b'"A2"', 1, T0 + 4),
            "s:b": (b'"B"', 2, T0 + 3),
        }
        other = make_workflow()
        flows.start_execution(other, now=T0)
        with pytest.raises(LeaseLost):  # the attempt is not one of that execution
            flows.put_memo(fn.ref, other.id, "s:x", b"1", now=T0 + 5)
        assert [r.job_id for r in storage.reap(now=T0 + 1 + LEASE + MIN)] == [fn.id]
        with pytest.raises(LeaseLost):  # a reaped attempt stores nothing
            flows.put_memo(fn.ref, new.id, "s:c", b"1", now=T0 + 2 * MIN)
        assert sorted(memos_of(flows, new.id)) == ["s:a", "s:b"]

    def test_a_memo_of_a_megabyte_is_read_back_whole(self, storage: Storage) -> None:
        """A step's large result (1 MiB, at most ``max_result_bytes()``), replaced by a
        small one and back: each read gives the value last stored, whole."""
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        big, bigger = os.urandom(result_size(storage)), os.urandom(result_size(storage))
        for i, value in enumerate((big, b'"small"', bigger)):
            flows.put_memo(fn.ref, new.id, "s:big", value, now=T0 + 2 + i)
            assert memos_of(flows, new.id)["s:big"] == value

    def test_a_sleep_suspends_without_spending_an_attempt(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        new = make_workflow(max_attempts=1)
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        wake = T0 + HOUR
        sleep = Suspension(ready_at=wake, memos=(MemoPut("t:0", str(wake).encode()),))
        assert storage.finish([suspended(fn.ref, sleep)], now=T0 + 2) == [True]
        record = flows.get_execution(new.id)
        assert record is not None and record.state is _E.WAITING
        state = state_of(flows, new.id)
        assert [s.state for s in state.steps] == [_S.QUEUED]
        assert state.memos["t:0"].value == str(wake).encode()
        job = job_of(storage, fn.id)
        assert (job.state, job.attempts, job.max_attempts) == (JobState.QUEUED, 1, 2)
        [attempt] = storage.list_attempts(fn.id)
        assert (attempt.outcome, attempt.reason) == (Outcome.SUSPENDED, "sleep")
        assert claim_function(storage, new.id, wake - 1) is None  # never early
        again = claim_function(storage, new.id, wake)
        assert again is not None and again.attempt == 2
        record = flows.get_execution(new.id)
        assert record is not None and record.state is _E.RUNNING
        assert storage.finish([complete_end(again.ref, b'"done"')], now=wake + 1) == [True]
        record = flows.get_execution(new.id)
        assert record is not None
        assert (record.state, record.finished_at) == (_E.SUCCEEDED, wake + 1)

    def test_a_parked_function_is_neither_claimed_nor_counted(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        wait = event_wait(0, "approval", since=T0 + 1)
        parked = Suspension(ready_at=None, memos=(_wait_meta(T0 + 1, None),), wait=wait)
        storage.finish([suspended(fn.ref, parked)], now=T0 + 2)
        assert claim_function(storage, new.id, T0 + 365 * DAY) is None
        assert claim_function(storage, new.id, PARKED_AT - 1) is None
        assert storage.count_pending(["default"], MIN, now=T0 + 3) == 0
        assert job_of(storage, fn.id).state is JobState.QUEUED

    def test_waiting_counts_as_active_for_concurrency(self, storage: Storage) -> None:
        from queue_core.rules.flows.spec import ConcurrencySpec

        flows = workflows_of(storage)
        conc = ConcurrencySpec(1, "queue")
        first = make_workflow(concurrency=conc)
        assert flows.start_execution(first, now=T0) is _E.RUNNING
        fn = claim_function(storage, first.id, T0 + 1)
        assert fn is not None
        sleep = Suspension(ready_at=T0 + DAY)
        storage.finish([suspended(fn.ref, sleep)], now=T0 + 2)
        assert flows.start_execution(make_workflow(concurrency=conc), now=T0 + 3) is _E.QUEUED


class WorkflowEventContract(ContractBase):
    """``send_event``: stored, and delivered to the waits it reaches, each once."""

    def _waiting(
        self,
        storage: Storage,
        name: str,
        *,
        key: str | None = None,
        since: int = T0 + 2,
        until: int | None = None,
        at: int = T0 + 3,
    ) -> str:
        """A workflow whose function stopped at ``at`` to wait for ``name`` since ``since``."""
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        wait = event_wait(0, name, key=key, since=since, until=until)
        stop = Suspension(
            ready_at=until, memos=(_wait_meta(since, until),), wait=wait, reason="event"
        )
        assert storage.finish([suspended(fn.ref, stop)], now=at) == [True]
        return new.id

    def test_an_event_wakes_its_wait_once(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        eid = self._waiting(storage, "approval")
        assert claim_function(storage, eid, T0 + DAY) is None
        assert flows.send_event("approval", None, b'{"by":"ann"}', now=T0 + 5 * SEC) == 1
        assert memos_of(flows, eid)["d:0"] == b'{"by":"ann"}'
        assert flows.send_event("approval", None, b'{"by":"bob"}', now=T0 + 6 * SEC) == 0
        assert memos_of(flows, eid)["d:0"] == b'{"by":"ann"}'  # one event, once
        fn = claim_function(storage, eid, T0 + 6 * SEC)
        assert fn is not None  # woken: ready since the event
        record = flows.get_execution(eid)
        assert record is not None and record.state is _E.RUNNING

    def test_an_event_reaches_the_waits_of_its_key_and_those_without_one(
        self, storage: Storage
    ) -> None:
        flows = workflows_of(storage)
        one = self._waiting(storage, "k", key="1")
        two = self._waiting(storage, "k", key="2")
        anything = self._waiting(storage, "k")
        assert flows.send_event("other", "1", b"0", now=T0 + 4) == 0
        assert flows.send_event("k", None, b"0", now=T0 + 5) == 1  # only the keyless wait
        assert memos_of(flows, anything)["d:0"] == b"0"
        assert flows.send_event("k", "1", b"1", now=T0 + 6) == 1
        assert memos_of(flows, one)["d:0"] == b"1"
        assert "d:0" not in memos_of(flows, two)

    def test_an_event_sent_while_the_wait_was_being_suspended_is_delivered(
        self, storage: Storage
    ) -> None:
        """The wait began at ``since``; the event came before the suspension was stored."""
        flows = workflows_of(storage)
        new = make_workflow()
        flows.start_execution(new, now=T0)
        fn = claim_function(storage, new.id, T0 + 1)
        assert fn is not None
        assert flows.send_event("approval", "42", b'"yes"', now=T0 + 3) == 0  # no wait yet
        wait = event_wait(0, "approval", key="42", since=T0 + 2)
        stop = Suspension(ready_at=None, memos=(_wait_meta(T0 + 2, None),), wait=wait)
        storage.finish([suspended(fn.ref, stop)], now=T0 + 5)
        assert memos_of(flows, new.id)["d:0"] == b'"yes"'
        assert claim_function(storage, new.id, T0 + 5) is not None  # ready at once
        assert flows.send_event("approval", "42", b'"again"', now=T0 + 6) == 0  # no wait left

    def test_an_event_sent_before_the_wait_began_is_kept_but_not_delivered(
        self, storage: Storage
    ) -> None:
        flows = workflows_of(storage)
        assert flows.send_event("approval", None, b'"early"', now=T0 + 1) == 0
        eid = self._waiting(storage, "approval", since=T0 + 2, at=T0 + 3)
        assert "d:0" not in memos_of(flows, eid)
        assert claim_function(storage, eid, T0 + DAY) is None
        assert flows.send_event("approval", None, b'"late"', now=T0 + DAY) == 1
        assert memos_of(flows, eid)["d:0"] == b'"late"'

    def test_a_timed_out_wait_gets_no_event_and_its_function_runs(self, storage: Storage) -> None:
        flows = workflows_of(storage)
        until = T0 + MIN
        eid = self._waiting(storage, "approval", until=until)
        assert claim_function(storage, eid, until - 1) is None
        assert flows.send_event("approval", None, b'"late"', now=until) == 0  # at the timeout
        assert "d:0" not in memos_of(flows, eid)
        assert claim_function(storage, eid, until) is not None  # ready at its timeout


class DurableContract(
    WorkflowSuspendContract, WorkflowEventContract, WorkflowChildrenContract, ResumeContract
):
    """Every durable-workflow contract test (``SupportsWorkflows``)."""

"""Contract: ``cancel_in_progress`` and ``latest`` for flow executions (``SupportsFlows``
with ``SupportsSupersede``), SPEC §13. Each test skips, naming the ability it lacks."""

from __future__ import annotations

import pytest

from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome
from queue_core.rules.flows.spec import ConcurrencySpec
from queue_core.storage.abilities import SupportsFlows, SupportsSupersede
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import LEASE, SEC, T0, cancel_end, complete_end, new_id
from queue_core.testing.suite._base import ContractBase, lacks
from queue_core.testing.suite._durable_base import claim_function, make_workflow, workflows_of
from queue_core.testing.suite._flows_base import (
    claim_steps,
    flows_of,
    make_execution,
    make_spec,
    states,
)

__all__ = ["FlowSupersedeContract"]


def _flows(storage: Storage) -> SupportsFlows:
    flows = flows_of(storage)
    if not isinstance(storage, SupportsSupersede):
        pytest.skip(lacks(SupportsSupersede))
    return flows


class FlowSupersedeContract(ContractBase):
    """A new execution ends older ones of its key: cancelled, or skipped while queued."""

    def test_cancel_in_progress_supersedes_the_running_execution(self, storage: Storage) -> None:
        """As a superseded job (SPEC §13): the old execution and its running step's attempt
        and job end ``cancelled``, reason ``superseded``, when the new one arrives; the
        old step's worker finds its lease gone and its end is refused."""
        flows = _flows(storage)
        name = f"sup-flow-{new_id()}"
        spec = make_spec({"a": []}, name=name, concurrency=ConcurrencySpec(1, "cancel_in_progress"))
        old, new = make_execution(spec), make_execution(spec)
        assert flows.start_execution(old, now=T0) is ExecutionState.RUNNING
        (step,) = claim_steps(storage, T0 + 1).values()
        assert flows.start_execution(new, now=T0 + SEC) is ExecutionState.RUNNING
        record = flows.get_execution(old.id)
        assert record is not None
        assert (record.state, record.reason, record.finished_at) == (
            ExecutionState.CANCELLED,
            ExecutionReason.SUPERSEDED,
            T0 + SEC,
        )
        assert states(flows, old.id) == {"a": StepState.CANCELLED}
        job = storage.get_job(step.ref.job_id)
        assert job is not None
        assert (job.state, job.reason) == (JobState.CANCELLED, "superseded")
        attempt = storage.list_attempts(step.ref.job_id)[-1]
        assert (attempt.number, attempt.outcome, attempt.reason) == (
            step.ref.attempt,
            Outcome.CANCELLED,
            "superseded",
        )
        assert storage.renew([step.ref], LEASE, now=T0 + 2 * SEC).lost == [step.ref]
        assert storage.finish([cancel_end(step.ref)], now=T0 + 3 * SEC) == [False]
        assert [c.execution_id for c in claim_steps(storage, T0 + 4 * SEC).values()] == [new.id]

    def test_cancel_in_progress_supersedes_a_running_workflow(self, storage: Storage) -> None:
        """The same for a workflow (SPEC §12, §13): its running function step's attempt and
        job end ``cancelled``, ``superseded``; the new workflow's function runs."""
        _flows(storage)
        flows = workflows_of(storage)
        conc = ConcurrencySpec(1, "cancel_in_progress")
        name = f"sup-wf-{new_id()}"
        old, new = (make_workflow(concurrency=conc, name=name) for _ in range(2))
        assert flows.start_execution(old, now=T0) is ExecutionState.RUNNING
        fn = claim_function(storage, old.id, T0 + 1)
        assert fn is not None
        assert flows.start_execution(new, now=T0 + SEC) is ExecutionState.RUNNING
        record = flows.get_execution(old.id)
        assert record is not None
        assert (record.state, record.reason) == (
            ExecutionState.CANCELLED,
            ExecutionReason.SUPERSEDED,
        )
        job = storage.get_job(fn.id)
        assert job is not None
        assert (job.state, job.reason) == (JobState.CANCELLED, "superseded")
        assert storage.renew([fn.ref], LEASE, now=T0 + 2 * SEC).lost == [fn.ref]
        assert claim_function(storage, new.id, T0 + 2 * SEC) is not None

    def test_cancel_in_progress_ends_a_queued_execution_at_once(self, storage: Storage) -> None:
        flows = _flows(storage)
        name = f"sup-flow-{new_id()}"
        spec = make_spec({"a": []}, name=name, concurrency=ConcurrencySpec(1, "cancel_in_progress"))
        first, second = make_execution(spec), make_execution(spec)
        flows.start_execution(first, now=T0)
        flows.start_execution(second, now=T0 + 1)  # first had not started a step
        record = flows.get_execution(first.id)
        assert record is not None
        assert (record.state, record.reason) == (
            ExecutionState.CANCELLED,
            ExecutionReason.SUPERSEDED,
        )
        assert states(flows, first.id) == {"a": StepState.NOT_RUN}

    def test_latest_keeps_one_queued_execution_the_newest(self, storage: Storage) -> None:
        flows = _flows(storage)
        name = f"sup-flow-{new_id()}"
        spec = make_spec({"a": []}, name=name, concurrency=ConcurrencySpec(1, "latest"))
        runs = [make_execution(spec) for _ in range(3)]
        got = [flows.start_execution(e, now=T0 + i) for i, e in enumerate(runs)]
        assert got == [ExecutionState.RUNNING, ExecutionState.QUEUED, ExecutionState.QUEUED]
        skipped = flows.get_execution(runs[1].id)
        assert skipped is not None
        assert (skipped.state, skipped.reason) == (
            ExecutionState.SKIPPED,
            ExecutionReason.SUPERSEDED,
        )
        assert states(flows, runs[1].id) == {"a": StepState.NOT_RUN}
        (step,) = claim_steps(storage, T0 + SEC).values()
        assert storage.finish([complete_end(step.ref)], now=T0 + 2 * SEC) == [True]
        newest = flows.get_execution(runs[2].id)
        assert newest is not None and newest.state is ExecutionState.RUNNING

"""Builders and checks the flow contract tests share (``SupportsFlows``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from queue_core.records.flows import StepState
from queue_core.records.jobs import ClaimedJob
from queue_core.rules.flows import decide
from queue_core.rules.flows.decide import ExecutionView, Transition
from queue_core.rules.flows.spec import ConcurrencySpec, FlowSpec, StepSpec
from queue_core.storage.abilities import SupportsFlows
from queue_core.storage.flows import NewExecution, step_job_id
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import LEASE, new_id, new_job
from queue_core.testing.suite._base import lacks

__all__ = [
    "claim_steps",
    "flows_of",
    "follows",
    "make_execution",
    "make_spec",
    "states",
    "view_of",
]


def flows_of(storage: Storage) -> SupportsFlows:
    """The storage as :class:`SupportsFlows`; the test skips, naming it, when it lacks it."""
    if not isinstance(storage, SupportsFlows):
        pytest.skip(lacks(SupportsFlows))
    return storage


def make_spec(
    graph: Mapping[str, Sequence[str]],
    *,
    name: str = "contract-flow",
    max_parallel: int = 0,
    timeout_ms: int | None = None,
    concurrency: ConcurrencySpec | None = None,
) -> FlowSpec:
    """A flow whose steps are ``graph``'s keys (in order), each depending on its values."""
    return FlowSpec(
        name=name,
        steps=tuple(
            StepSpec(id=sid, kind="code", task="tests.step", depends_on=tuple(deps))
            for sid, deps in graph.items()
        ),
        max_parallel=max_parallel,
        timeout_ms=timeout_ms,
        concurrency=concurrency,
    )


def make_execution(
    spec: FlowSpec,
    *,
    input: bytes = b'{"day":1}',
    conc_key: str | None = None,
    **job_fields: Any,
) -> NewExecution:
    """An execution of ``spec`` whose step jobs are :func:`new_job` with ``job_fields``."""
    eid = new_id()
    jobs = [
        new_job(
            id=step_job_id(eid, i),
            task_name=f"tests.step.{s.id}",
            payload=b'{"args":[],"kwargs":{}}',
            execution_id=eid,
            step_id=s.id,
            **job_fields,
        )
        for i, s in enumerate(spec.steps)
    ]
    return NewExecution.build(id=eid, spec=spec, input=input, jobs=jobs, conc_key=conc_key)


def view_of(flows: SupportsFlows, execution_id: str) -> ExecutionView:
    """The stored execution as the decisions see it."""
    record = flows.get_execution(execution_id)
    assert record is not None, f"execution {execution_id} not found"
    return record.view(flows.list_steps(execution_id))


def states(flows: SupportsFlows, execution_id: str) -> dict[str, StepState]:
    """``{step id: state}`` of every step."""
    return {s.step_id: s.state for s in flows.list_steps(execution_id)}


def follows(before: ExecutionView, transition: Transition, after: ExecutionView) -> None:
    """The stored view after an event equals :func:`decide.apply` of the decision."""
    assert after == decide.apply(before, transition)


def claim_steps(
    storage: Storage, now: int, limit: int = 10, worker: str = "w"
) -> dict[str, ClaimedJob]:
    """Claim up to ``limit`` jobs of the ``default`` queue; ``{step id: claimed job}``."""
    got = storage.claim(worker, ["default"], limit, LEASE, now=now)
    return {c.step_id or c.id: c for c in got}

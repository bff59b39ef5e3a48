"""Durable workflows in storage (SPEC §12): what ``workflow_state`` returns and the ids of
sub-executions. The ability itself is
:class:`~queue_core.storage.abilities.SupportsWorkflows`; the records that cross the
protocol (memos, events, suspensions) are in :mod:`queue_core.records.workflows`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from queue_core.records.jobs import JobRecord
from queue_core.records.workflows import MemoRecord
from queue_core.storage.flows import ExecutionRecord, StepRecord

__all__ = ["WorkflowState", "sub_execution_id"]


def sub_execution_id(parent_id: str, idx: int) -> str:
    """The id of the sub-execution that step ``idx`` of ``parent_id`` stands for
    (``ctx.run_flow``): ``"<parent>.<idx>"``, deterministic, and sharing the parent's
    prefix (a storage may keep both in one hash slot)."""
    return f"{parent_id}.{idx}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowState:
    """Everything an attempt of a workflow's function step reads when it starts: one
    storage read (:meth:`~queue_core.storage.abilities.SupportsWorkflows.workflow_state`)."""

    execution: ExecutionRecord
    steps: list[StepRecord]
    """Every step in index order: the function step (0), then the children."""
    memos: dict[str, MemoRecord] = field(default_factory=dict)
    """Every memo of the execution, by key."""
    jobs: dict[int, JobRecord] = field(default_factory=dict)
    """The job of each step that has one (by step index): the children's states,
    results and dead-letter ids."""

"""One flow execution as a transaction of the SQL backend sees it (:class:`Open`): its
row, its step rows read so far with the plan's changes to them, and what
:meth:`~backends.sql.flows.Flows._flush` has yet to write; with the helpers that read a
step row and the rows a step end's fast decision reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backends.sql.flow_reads import reason_of
from backends.sql.records import Row
from queue_core.records.flows import ExecutionState, StepState
from queue_core.rules.flows import plan
from queue_core.rules.flows.decide import WORKFLOW
from queue_core.rules.flows.decide_fast import OFF_FAST_PATH, ExecutionHead, StepIndex

__all__ = ["Open", "StepEnd", "StepRow", "dependents_of", "is_sub", "step_row", "touched_rows"]

StepEnd = tuple[str, str, str | None]
"""A step job's change: (step id, the job's new state as stored, its reason)."""

_S, _E = StepState, ExecutionState


@dataclass(slots=True)
class StepRow:
    """A step row as this transaction sees it."""

    state: StepState
    reason: str | None
    unmet: int | None
    running: bool = False
    """Stored ``queued`` and its job was running when read (the view shows ``running``)."""
    lowered: int = 0
    """Dependencies that succeeded in this transaction (``unmet`` written minus this)."""
    dirty: bool = False
    sub: bool = False
    """A workflow's step that stands for a sub-execution (no job)."""


class Open:
    """One execution locked in a flow transaction: its row, its step rows read so far with
    the plan's changes, and what :meth:`Flows._flush` has yet to write."""

    def __init__(
        self, cur: Any, head: dict[str, Any], index: StepIndex, t: int, parent: Open | None
    ) -> None:
        self.cur, self.head, self.index, self.t = cur, head, index, t
        self.parent = parent
        """A sub-execution's parent, locked first (its end ends the parent's step)."""
        self.id: str = head["id"]
        self.workflow = head["kind"] == WORKFLOW
        self.steps: dict[int, StepRow] = {}
        self.whole = self.jobs_locked = False
        """``whole``: every step row is read (with its job's state)."""
        self.ds = self.db = 0
        self.started = self.finished = self.changed = False
        self.releases: list[plan.Release] = []
        self.skipped: list[StepEnd] = []
        """Children stored ``skipped`` by their ``skip`` limit: their steps end next."""
        self.seen: ExecutionHead | None = None
        self.stored: dict[int, Row] = {}
        """Step rows read with their stored job (``idx, job, payload, job_id``: what a
        release needs), by index."""
        self.pending: Any = None
        """A cursor whose step rows were asked ahead and not read yet (:meth:`Flows.preload`)."""

    def head_view(self) -> ExecutionHead:
        """The execution's fields as the fast rule reads them (kept until they change)."""
        if self.seen is None:
            h = self.head
            self.seen = ExecutionHead(
                state=_E(h["state"]), max_parallel=h["max_parallel"],
                deadline_at=h["deadline_at"], reason=reason_of(h["reason"]),
                failed_step=h["failed_step"], kind=h["kind"] or "flow",
            )  # fmt: skip
        return self.seen

    def counts(self) -> dict[StepState, int]:
        """Steps by state as the counters say: ``n_bad`` under one OFF_FAST_PATH state
        (the rule asks only whether there is one); NULL counters (an execution started
        before schema version 10) count as one: judged on the whole execution."""
        ok, bad = self.head["n_succeeded"], self.head["n_bad"]
        if ok is None or bad is None:
            return {OFF_FAST_PATH[0]: 1}
        return {_S.SUCCEEDED: ok + self.ds, OFF_FAST_PATH[0]: bad + self.db}


def step_row(x: Open, r: Row) -> StepRow:
    """A step row as read (a workflow's step past the function's without a job stands
    for a sub-execution)."""
    sub = x.workflow and r["idx"] > 0 and r["job_id"] is None
    return StepRow(_S(r["state"]), r["reason"], r["unmet"], sub=sub)


def is_sub(x: Open, idx: int) -> bool:
    """Whether step ``idx`` of ``x`` stands for a sub-execution (as read so far)."""
    step = x.steps.get(idx)
    return step is not None and step.sub


def touched_rows(index: StepIndex, i: int, state: str) -> tuple[int, ...]:
    """The rows a step end's fast decision reads: the step's, and its dependents' on success."""
    return (i, *index.dependents[i]) if state == _S.SUCCEEDED.value else (i,)


def dependents_of(x: Open, i: int) -> dict[str, tuple[StepState, int]]:
    """Step ``i``'s dependents as the fast rule reads them: state and ``unmet`` (a NULL
    ``unmet``, never counted, never looks ready: such executions are judged whole anyway)."""
    index, steps = x.index, x.steps
    return {
        index.ids[d]: (steps[d].state, u if (u := steps[d].unmet) is not None else -1)
        for d in index.dependents[i]
    }

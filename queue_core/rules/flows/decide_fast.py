"""The common step end of a flow execution, decided from O(dependents) data.

:func:`queue_core.rules.flows.decide.step_ended` judges a whole :class:`ExecutionView`: every
step's state is read and scanned on each step end, which makes a wide execution cost
O(steps) per step (O(steps²) in all). The common case — a step of a ``running``
execution without ``max_parallel`` succeeds or waits for a retry, nothing has failed and
the deadline has not passed — only needs:

- the execution's fields (:class:`ExecutionHead`);
- the spec's :class:`StepIndex` (dependents of each step; built once per spec);
- how many steps are in each state (counters storage keeps beside the step states);
- the ended step's current state, and for each of its dependents its state and how many
  of its dependencies had not succeeded yet (``unmet``, a counter storage keeps).

:func:`step_ended_fast` decides that case exactly as :func:`decide.step_ended` does on
the full view (``tests/unit/flows/test_decide_fast.py`` checks it over random DAGs and
events), and returns ``None`` for every other case, which the caller decides with
:func:`decide.step_ended` on the full view. Pure: no I/O, no clock.

It relies on what the decisions keep true of a ``running`` execution without
``max_parallel`` after each event: no pending step has all its dependencies succeeded
(rule 6 released it), and no step is blocking or ``timed_out`` unless ``failed_step`` is
set or the execution ended (rules 3-4). So a success can only make the succeeded step's
dependents ready, and a retry makes nothing ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.rules.flows.decide import Transition

__all__ = [
    "OFF_FAST_PATH",
    "ExecutionHead",
    "StepIndex",
    "advance_idle",
    "step_ended_fast",
    "step_index",
]

_S = StepState
OFF_FAST_PATH: Final = (_S.TIMED_OUT, _S.DEAD, _S.CANCELLED, _S.SKIPPED, _S.NOT_RUN)
"""Step states that take an execution off the fast path (rules 3-4 of ``decide``): a
storage keeping counts of steps by state judges the whole execution while any is > 0."""


@dataclass(frozen=True, slots=True)
class StepIndex:
    """The steps of a spec, by definition index, with their dependents precomputed."""

    ids: tuple[str, ...]
    pos: Mapping[str, int]
    """Step id -> its index."""
    depends_on: tuple[tuple[str, ...], ...]
    """Dependencies of each step, as given."""
    dependents: tuple[tuple[int, ...], ...]
    """Indexes of the steps that depend on each step, ascending (definition order)."""
    unmet: tuple[int, ...]
    """Distinct dependencies of each step: its ``unmet`` counter before any succeeded."""


def step_index(steps: Sequence[tuple[str, Sequence[str]]]) -> StepIndex:
    """The :class:`StepIndex` of ``(step id, dependencies)`` pairs in definition order.

    O(steps + edges); storage caches it per spec (the steps of an execution never
    change). Raises ``KeyError`` naming a dependency that is not a step.
    """
    ids = tuple(sid for sid, _ in steps)
    pos = {sid: i for i, sid in enumerate(ids)}
    dependents: list[list[int]] = [[] for _ in ids]
    unmet: list[int] = []
    for i, (_, deps) in enumerate(steps):
        distinct = dict.fromkeys(deps)
        unmet.append(len(distinct))
        for d in distinct:
            dependents[pos[d]].append(i)
    return StepIndex(
        ids=ids,
        pos=pos,
        depends_on=tuple(tuple(deps) for _, deps in steps),
        dependents=tuple(tuple(d) for d in dependents),
        unmet=tuple(unmet),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionHead:
    """The fields of an execution :func:`step_ended_fast` reads (no step states)."""

    state: ExecutionState
    max_parallel: int = 0
    deadline_at: int | None = None
    reason: ExecutionReason | None = None
    failed_step: str | None = None
    kind: str = "flow"
    """The execution's kind: a workflow (``"workflow"``) is always judged on the full view."""


def step_ended_fast(
    head: ExecutionHead,
    index: StepIndex,
    counts: Mapping[StepState, int],
    step_id: str,
    current: StepState,
    state: StepState,
    dependents: Mapping[str, tuple[StepState, int]],
    now: int,
) -> Transition | None:
    """:func:`decide.step_ended` of ``step_id`` (now ``current``) ending ``state``, or
    ``None`` when the fast path does not apply (decide it on the full view).

    ``counts`` is how many steps are in each state (missing = 0) before the event;
    ``dependents`` maps each dependent of ``step_id`` to its state and its ``unmet``
    counter (dependencies not succeeded) before the event; only needed when ``state`` is
    ``succeeded``. A workflow's step end (``head.kind == "workflow"``) is never decided here.
    """
    if (
        state not in (_S.SUCCEEDED, _S.QUEUED)
        or head.kind != "flow"
        or current.finished
        or head.state is not ExecutionState.RUNNING
        or head.failed_step is not None
        or head.max_parallel > 0
        or (head.deadline_at is not None and now >= head.deadline_at)
        or any(counts.get(s, 0) for s in OFF_FAST_PATH)
    ):
        return None
    base = Transition(
        state=head.state,
        reason=head.reason,
        failed_step=None,
        deadline_at=head.deadline_at,
        ended=((step_id, state),),
    )
    if state is _S.QUEUED:
        return base
    if counts.get(_S.SUCCEEDED, 0) + 1 == len(index.ids):
        return Transition(
            state=ExecutionState.SUCCEEDED,
            reason=None,
            failed_step=None,
            deadline_at=head.deadline_at,
            finished=True,
            ended=base.ended,
        )
    release = []
    for d in index.dependents[index.pos[step_id]]:
        sid = index.ids[d]
        st, unmet = dependents[sid]
        if st is _S.PENDING and unmet == 1:
            release.append(sid)
    if not release:
        return base
    return Transition(
        state=head.state,
        reason=head.reason,
        failed_step=None,
        deadline_at=head.deadline_at,
        ended=base.ended,
        release=tuple(release),
    )


def advance_idle(
    head: ExecutionHead, counts: Mapping[StepState, int], steps: int, now: int
) -> bool:
    """``True`` when :func:`decide.advance` at ``now`` would change nothing, known from the
    execution's fields and its counts of steps by state (``steps`` in all) alone.

    A finished execution; or a ``running`` one without ``max_parallel`` that nothing has
    failed, not past its deadline and not every step succeeded (its ready steps were
    released by the event that made them ready). ``False`` means: judge the full view.
    """
    if head.state.finished:
        return True
    return (
        head.state is ExecutionState.RUNNING
        and head.kind == "flow"
        and head.failed_step is None
        and head.max_parallel <= 0
        and (head.deadline_at is None or now < head.deadline_at)
        and not any(counts.get(s, 0) for s in OFF_FAST_PATH)
        and counts.get(_S.SUCCEEDED, 0) < steps
    )

"""Folding step events: for storages that record a step's end (or claim) as an event beside
the job and judge the execution later (Redis, DynamoDB), the one rule that turns pending
events into the execution's next state and the plan that writes it
(:mod:`queue_core.rules.flows.plan`'s operations).

:func:`fold` reads the whole execution; :func:`fold_fast` decides the common case from
O(events + dependents) data and plans exactly what :func:`fold` would (a randomized test
compares them). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from queue_core.records.flows import StepState
from queue_core.rules.flows import decide
from queue_core.rules.flows.decide import ExecutionView, StepView, Transition
from queue_core.rules.flows.decide_fast import (
    ExecutionHead,
    StepIndex,
    advance_idle,
    step_ended_fast,
)
from queue_core.rules.flows.plan import Op, SetStep, _view_prior, ops

__all__ = ["FastFolded", "Folded", "StepEvent", "StepReader", "fold", "fold_fast"]

_S = StepState


@dataclass(frozen=True, slots=True)
class StepEvent:
    """A change of one step's job recorded beside the job and folded into the execution
    later (storages that do not judge the execution in the job's own write)."""

    idx: int
    state: StepState
    """``running``: the job was claimed for ``attempt``; otherwise the job's new state
    after ``attempt`` (``queued`` for a retry)."""
    attempt: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Folded:
    """The result of :func:`fold`."""

    view: ExecutionView
    """The execution after every event and the judgement."""
    ops: list[Op]
    finished: bool
    """The execution reached a final state (promote its concurrency key)."""


def _order(e: StepEvent) -> tuple[int, bool, bool]:
    """Events of one step, oldest first: by attempt; within an attempt its claim, then its
    end -- a retry (``queued``) before a later end of the queued job (a cancel, a
    schedule-to-start expiry), which storage records with the same attempt number."""
    return e.attempt, e.state is not _S.RUNNING, e.state is not _S.QUEUED


def _latest(events: Iterable[StepEvent]) -> dict[int, StepEvent]:
    """Each step's latest event (:func:`_order`)."""
    latest: dict[int, StepEvent] = {}
    for e in events:
        cur = latest.get(e.idx)
        if cur is None or _order(e) > _order(cur):
            latest[e.idx] = e
    return latest


def fold(
    view: ExecutionView,
    index: StepIndex,
    events: Iterable[StepEvent],
    now: int,
    judge: Callable[[ExecutionView], Transition] | None = None,
) -> Folded:
    """Fold pending step events into ``view``, then judge it; the plan of all of it.

    Only each step's latest event counts (an earlier attempt of a step with a later one
    was a retry, which changes nothing else), whatever order storage kept them in:

    1. steps whose latest event is a claim are ``running`` first -- they were claimed while
       the stored execution still allowed it, so a sibling's failure folded with them
       must let them finish, not mark them ``not_run``;
    2. then each step's end, in definition order, is :func:`~.decide.step_ended`;
    3. then ``judge(view)`` (a cancel, a start) or, without a judge and when no step
       ended (no event, or only claims), :func:`~.decide.advance` (the deadline).
    """
    out: list[Op] = []
    finished = ended_any = False
    latest = _latest(events)
    for i in sorted(latest):
        ev = latest[i]
        was = view.steps[i].state
        if ev.state is _S.RUNNING and not was.finished and was is not _S.RUNNING:
            view = _with_step(view, i, _S.RUNNING)
            out.append(SetStep(index.ids[i], i, _S.RUNNING, None, was))
    for i in sorted(latest):
        ev = latest[i]
        if ev.state is _S.RUNNING:
            continue
        sid, ended_any = index.ids[i], True
        ended = decide.step_ended(view, sid, ev.state, now)
        out += ops(ended, index, _view_prior(view), {sid: ev.reason})
        finished = finished or ended.finished
        view = decide.apply(view, ended)
    t = judge(view) if judge is not None else None
    if t is None and not ended_any:  # a step end was judged by decide.step_ended
        t = decide.advance(view, now)
    if t is not None and t.changes(view):
        out += ops(t, index, _view_prior(view))
        finished = finished or t.finished
        view = decide.apply(view, t)
    return Folded(view, out, finished)


@dataclass(frozen=True, slots=True)
class FastFolded:
    """The result of :func:`fold_fast`."""

    head: ExecutionHead
    """The execution's fields after every event."""
    ops: list[Op]
    finished: bool
    """The execution reached a final state (promote its concurrency key)."""


StepReader = Callable[
    [Sequence[int], Sequence[int]], tuple[Mapping[int, StepState], Mapping[int, int]] | None
]
"""``read(steps, dependents)``: the states of ``steps`` and ``dependents`` and the unmet
counts of ``dependents`` (``None``: storage does not have them)."""


def fold_fast(
    head: ExecutionHead,
    index: StepIndex,
    counts: Mapping[StepState, int],
    events: Iterable[StepEvent],
    read: StepReader,
    now: int,
) -> FastFolded | None:
    """:func:`fold` with no judge, from O(events + dependents) data; ``None`` when the
    full view must decide (call :func:`fold`).

    ``head`` and ``counts`` (steps by state) are what :func:`step_end` reads; ``read`` is
    called once, for the steps with events and the dependents of those that succeeded.
    The rule is :func:`fold`'s -- each step's latest event; claims first; then each end,
    in definition order, decided by :func:`~.decide_fast.step_ended_fast` on what the
    previous one left -- and so are the operations, whenever every end is one the fast
    decision covers (``tests/unit/flows/test_plan.py`` checks it on random executions).
    With no event it is :func:`~.decide_fast.advance_idle`'s case (nothing to write).
    """
    latest = _latest(events)
    if not latest:
        idle = advance_idle(head, counts, len(index.ids), now)
        return FastFolded(head, [], False) if idle else None
    order = sorted(latest)
    ends = [latest[i] for i in order if latest[i].state is not _S.RUNNING]
    ok = (d for e in ends if e.state is _S.SUCCEEDED for d in index.dependents[e.idx])
    got = read(order, list(dict.fromkeys(ok)))
    if got is None:
        return None
    states, unmet, counted = dict(got[0]), dict(got[1]), Counter(counts)
    out: list[Op] = []

    def record(new: list[Op]) -> None:
        for op in new:
            if isinstance(op, SetStep):
                counted[op.was] -= 1
                counted[op.state] += 1
                states[op.idx] = op.state
                for d in op.dependents:
                    unmet[d] -= 1
        out.extend(new)

    record(_claims(index, latest, order, states))  # claims first, as fold does
    finished = False
    for e in ends:
        sid, cur = index.ids[e.idx], states[e.idx]
        deps = {}
        if e.state is _S.SUCCEEDED:
            deps = {index.ids[d]: (states[d], unmet[d]) for d in index.dependents[e.idx]}
        t = step_ended_fast(head, index, counted, sid, cur, e.state, deps, now)
        if t is None:
            return None

        def prior(s: str, sid: str = sid, cur: StepState = cur) -> StepState:
            return cur if s == sid else _S.PENDING  # the fast decision only releases

        record(ops(t, index, prior, {sid: e.reason}))
        head = replace(
            head,
            state=t.state,
            reason=t.reason,
            failed_step=t.failed_step,
            deadline_at=t.deadline_at,
        )
        finished = finished or t.finished
    return FastFolded(head, out, finished)


def _claims(
    index: StepIndex,
    latest: Mapping[int, StepEvent],
    order: Sequence[int],
    states: Mapping[int, StepState],
) -> list[Op]:
    """The ``running`` of each step whose latest event is a claim and that is not yet
    running or finished."""
    return [
        SetStep(index.ids[i], i, _S.RUNNING, None, states[i])
        for i in order
        if latest[i].state is _S.RUNNING and not states[i].finished and states[i] is not _S.RUNNING
    ]


def _with_step(view: ExecutionView, idx: int, state: StepState) -> ExecutionView:
    steps = list(view.steps)
    s = steps[idx]
    steps[idx] = StepView(s.id, state, s.depends_on)
    return replace(view, steps=tuple(steps))

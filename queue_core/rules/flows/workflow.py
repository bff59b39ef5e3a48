"""The storage-side decisions of durable workflows (SPEC §12) and of resuming executions,
as plans of :mod:`.plan` operations. Pure: no I/O, no clock (``now`` is an argument).

Storage reads what a decision needs in its atomic step, calls one function here and
applies the operations it returns with the same interpreter as every flow plan:

- :func:`suspend_ops`: a function step's attempt ended ``suspended``
  (:class:`~queue_core.records.workflows.SuspendedEnd`); storage passes the execution's
  view and the first stored event that matches the suspension's wait, if any
  (:func:`first_delivery` picks it);
- :func:`deliver_ops`: ``send_event`` delivers to one waiting execution
  (:func:`delivers` says which waits an event reaches);
- :func:`child_flow_ops`: ``ctx.run_flow`` started a sub-execution (after storage started
  it as ``start_execution`` does), :func:`sub_step_state` maps its end to its parent's step;
- :func:`check_resume` / :func:`resume_ops`: ``ExecutionHandle.retry()`` / ``replay()`` and
  ``retry_dead`` of a step's dead letter, for flows and workflows alike.

The rules a workflow execution follows otherwise (its function step's end, a child's end,
the deadline, a cancel) are :mod:`.decide`'s, for ``kind == "workflow"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace

from queue_core.records.errors import ConfigError
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.workflows import (
    FUNCTION_STEP,
    PARKED_AT,
    EventWait,
    MemoRecord,
    StoredEvent,
    Suspension,
)
from queue_core.rules.flows import decide, plan
from queue_core.rules.flows.decide import WORKFLOW, Admission, ExecutionView, StepView
from queue_core.rules.flows.decide_fast import StepIndex

__all__ = [
    "RESUMABLE",
    "check_resume",
    "child_flow_ops",
    "deliver_ops",
    "delivers",
    "first_delivery",
    "resume_ops",
    "sub_step_state",
    "suspend_ops",
]

_E = ExecutionState
_S = StepState
RESUMABLE = frozenset({_E.FAILED, _E.TIMED_OUT, _E.CANCELLED})
"""The states ``retry()`` resumes from."""


# --------------------------------------------------------------------------- events


def delivers(wait: EventWait, key: str | None, at: int) -> bool:
    """Whether an event with ``key`` sent at ``at`` ends ``wait`` (its name matched).

    A wait without a key takes any key; a wait with one takes only that key. The event
    must be sent at or after the wait began (``since``) and before it timed out
    (``until``), both by the storage's clock.
    """
    if wait.key is not None and wait.key != key:
        return False
    return wait.since <= at and (wait.until is None or at < wait.until)


def first_delivery(wait: EventWait, events: Iterable[StoredEvent], now: int) -> StoredEvent | None:
    """The stored event a newly registered ``wait`` receives at once: the first of
    ``events`` (in the order storage kept them: sent earliest first) that
    :func:`delivers` to it and was sent no later than ``now``; ``None`` otherwise."""
    for event in events:
        if event.name == wait.name and event.at <= now and delivers(wait, event.key, event.at):
            return event
    return None


def deliver_ops(wait: EventWait, data: bytes) -> list[plan.Op]:
    """The plan of delivering an event's ``data`` to ``wait`` (a wait of the execution
    being changed): the data memo, the wait removed, the function step woken."""
    return [
        plan.PutMemo(wait.memo_key, data),
        plan.DropWaiter(wait.memo_key),
        plan.Wake(FUNCTION_STEP, 0),
    ]


# --------------------------------------------------------------------------- suspension


def suspend_ops(
    view: ExecutionView,
    index: StepIndex,
    suspension: Suspension,
    now: int,
    event: StoredEvent | None = None,
) -> list[plan.Op]:
    """The plan of a function step's attempt that ended ``suspended``.

    The step's job was queued again by ``finish``; the step ends ``queued``
    (:func:`~.decide.step_ended`). When the execution stays active (not cancelling, not
    past its deadline), it is ``waiting`` and the suspension is applied: its memos, its
    children (each :class:`~.plan.AddStep` with its job), the awaited children that have
    not finished, the event wait -- delivered at once when ``event`` (the stored event
    :func:`first_delivery` found) is given -- and the function job's ready time: now when
    the wait is already over (the event delivered, or every awaited child finished),
    else ``ready_at`` (a sleep's wake time, an event wait's timeout) or
    :data:`~queue_core.records.workflows.PARKED_AT`. Otherwise only the step's end is
    applied (a cancel or the deadline then ends the function step ``not_run``).
    """
    prior = {s.id: s.state for s in view.steps}
    t = decide.step_ended(view, FUNCTION_STEP, _S.QUEUED, now)
    if t.state is not _E.RUNNING and t.state is not _E.WAITING:
        return plan.ops(t, index, prior.__getitem__)
    ops = plan.ops(replace(t, state=_E.WAITING), index, prior.__getitem__)
    ops += [plan.PutMemo(m.key, m.value) for m in suspension.memos]
    finished = {i for i, s in enumerate(view.steps) if s.state.finished}
    for child in suspension.children:
        ops.append(plan.AddStep(child.step_id, child.idx, _S.QUEUED, child.job))
    unfinished = tuple(i for i in suspension.awaiting if i not in finished)
    ids = {c.idx: c.step_id for c in suspension.children}
    ids.update(enumerate(s.id for s in view.steps))
    if unfinished or view.awaiting:
        ops.append(plan.SetAwaiting(tuple(ids[i] for i in unfinished), unfinished))
    ready = suspension.ready_at if suspension.ready_at is not None else PARKED_AT
    wait = suspension.wait
    if wait is not None and event is not None:
        ops += [plan.PutMemo(wait.memo_key, event.data)]
        ready = now
    elif wait is not None:
        ops.append(plan.AddWaiter(wait))
    if suspension.awaiting and not unfinished:
        ready = now
    ops.append(plan.SetReady(FUNCTION_STEP, 0, ready))
    return ops


# --------------------------------------------------------------------------- sub-executions


def sub_step_state(state: ExecutionState) -> StepState:
    """The state of the parent's step that stands for a sub-execution in ``state``:
    ``queued`` while it waits for a concurrency place, ``running`` while active,
    then ``succeeded``, ``dead`` (it failed), ``timed_out``, ``cancelled`` or ``skipped``."""
    if state is _E.QUEUED:
        return _S.QUEUED
    if not state.finished:
        return _S.RUNNING
    return {
        _E.SUCCEEDED: _S.SUCCEEDED,
        _E.FAILED: _S.DEAD,
        _E.TIMED_OUT: _S.TIMED_OUT,
        _E.CANCELLED: _S.CANCELLED,
        _E.SKIPPED: _S.SKIPPED,
    }[state]


def child_flow_ops(
    idx: int, step_id: str, memo_key: str, sub_state: ExecutionState
) -> list[plan.Op]:
    """The parent's plan when ``ctx.run_flow`` started a sub-execution (stored with the
    parent link, admitted ``sub_state``): its step (standing for it, no job) and the memo
    ``memo_key`` naming the step (``{"idx": idx, "flow": true}``)."""
    memo = json.dumps({"idx": idx, "flow": True}, separators=(",", ":")).encode()
    return [
        plan.AddStep(step_id, idx, sub_step_state(sub_state), None),
        plan.PutMemo(memo_key, memo),
    ]


# --------------------------------------------------------------------------- resume


def _bad(message: str, field: str, value: object) -> ConfigError:
    return ConfigError(message, code="invalid_option", field=field, value=value)


def _child_idx(memo: MemoRecord) -> int | None:
    try:
        value = json.loads(memo.value)
    except ValueError:
        return None
    idx = value.get("idx") if isinstance(value, dict) else value
    return idx if isinstance(idx, int) and not isinstance(idx, bool) else None


def _is_flow_child(memo: MemoRecord) -> bool:
    try:
        value = json.loads(memo.value)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("flow") is True


def check_resume(
    execution_id: str,
    view: ExecutionView,
    from_step: str | None,
    memos: Mapping[str, MemoRecord] | None = None,
) -> None:
    """Refuse a resume that cannot be done, before storage changes anything.

    ``retry()`` (``from_step`` ``None``) needs a ``failed``, ``timed_out`` or
    ``cancelled`` execution; ``replay(step)`` a finished one and a step it knows: a
    flow's step id; for a workflow the function step (``main``), a ``ctx.step`` id or a
    child's step id.

    Raises:
        ConfigError: ``invalid_option`` naming the state or the unknown step.
    """
    if from_step is None:
        if view.state not in RESUMABLE:
            raise _bad(
                f"execution {execution_id} is {view.state.value}: retry() resumes a failed, "
                "timed_out or cancelled execution",
                "execution",
                view.state.value,
            )
        return
    if not view.state.finished:
        raise _bad(
            f"execution {execution_id} is {view.state.value}: replay() needs a finished "
            "execution (cancel it first, or wait for it to end)",
            "execution",
            view.state.value,
        )
    known = [s.id for s in view.steps]
    if view.kind == WORKFLOW:
        known += sorted(k[2:] for k in (memos or {}) if k.startswith("s:"))
    if from_step not in known:
        raise _bad(
            f"execution {execution_id} has no step {from_step!r}; its steps: "
            + ", ".join(repr(k) for k in known),
            "step_id",
            from_step,
        )


def _dependents_closure(index: StepIndex, idx: int) -> set[int]:
    out, todo = set(), [idx]
    while todo:
        i = todo.pop()
        if i not in out:
            out.add(i)
            todo.extend(index.dependents[i])
    return out


def _memos_from(from_step: str, view: ExecutionView, memos: Mapping[str, MemoRecord]) -> int:
    """The memo number a workflow replay of ``from_step`` drops from (0: all of them)."""
    if from_step == FUNCTION_STEP:
        return 0
    own = memos.get(f"s:{from_step}")
    if own is not None:
        return own.seq
    pos = {s.id: i for i, s in enumerate(view.steps)}.get(from_step)
    for memo in memos.values():
        if memo.key.startswith("c:") and _child_idx(memo) == pos:
            return memo.seq
    return 0


def resume_ops(
    view: ExecutionView,
    index: StepIndex,
    admission: Admission,
    now: int,
    *,
    from_step: str | None = None,
    memos: Mapping[str, MemoRecord] | None = None,
) -> list[plan.Op]:
    """The plan of resuming a finished execution (call :func:`check_resume` first).

    The steps to run again go back to ``pending`` (with their unmet-dependency
    counters): every step that did not succeed -- a workflow's children standing for
    sub-executions excepted --, and with ``from_step`` that step too and, in a flow,
    every step that depends on it (transitively). A workflow's function step always
    runs again; a replay drops the memo of ``from_step`` (a ``ctx.step`` id or a child's
    step id) and every memo recorded after it -- all of them for the function step --
    so the function does that work again. The execution is reopened and admitted again
    (``admission`` of :func:`~.decide.admit`): ``running`` starts it with a new deadline
    (:func:`~.decide.start`; released steps whose job finished run again, see
    :class:`~.plan.Release`), ``queued`` waits for a concurrency place.

    Raises:
        ConfigError: ``concurrency_limit`` when ``admission`` is ``skipped`` (a ``skip``
            limit is full): nothing is to be applied.
    """
    if admission.state is _E.SKIPPED:
        raise ConfigError(
            "the flow's skip concurrency limit is reached: the execution cannot run again now",
            code="concurrency_limit",
            field="concurrency",
            value=admission.state.value,
        )
    memos = memos or {}
    flow_children = {
        _child_idx(m) for k, m in memos.items() if k.startswith("c:") and _is_flow_child(m)
    }
    again = {
        i
        for i, s in enumerate(view.steps)
        if s.state is not _S.SUCCEEDED and i not in flow_children
    }
    dropped: tuple[str, ...] = ()
    if view.kind == WORKFLOW:
        again.add(0)
        if from_step is not None:
            start = _memos_from(from_step, view, memos)
            dropped = tuple(sorted(k for k, m in memos.items() if m.seq >= start))
    elif from_step is not None:
        again |= _dependents_closure(index, index.pos[from_step])
    steps = tuple(
        StepView(s.id, _S.PENDING if i in again else s.state, s.depends_on)
        for i, s in enumerate(view.steps)
    )
    succeeded = {s.id for s in steps if s.state is _S.SUCCEEDED}
    ops: list[plan.Op] = []
    for i in sorted(again):
        s = view.steps[i]
        ops.append(plan.SetStep(s.id, i, _S.PENDING, None, s.state))
        ops.append(plan.SetUnmet(s.id, i, len(set(s.depends_on) - succeeded)))
    if dropped:
        ops.append(plan.DropMemos(dropped))
    if view.awaiting:
        ops.append(plan.SetAwaiting((), ()))
    ops.append(plan.Reopened())
    queued = replace(
        view,
        state=_E.QUEUED,
        steps=steps,
        reason=None,
        failed_step=None,
        deadline_at=None,
        awaiting=(),
    )
    return ops + plan.start_ops(queued, index, admission, now)

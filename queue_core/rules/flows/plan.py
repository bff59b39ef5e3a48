"""A flow decision as the ordered storage operations that apply it: one plan, every backend.

Every backend applies flows the same way. It reads what a decision needs -- the whole
execution (:class:`~.decide.ExecutionView`), or for the common step end only O(dependents)
data (:func:`step_end`) --, the core decides (:mod:`.decide`), and this module turns the
:class:`~.decide.Transition` into a list of operations (:data:`Op`) that the backend only
*interprets*, in order, atomically with the event that caused them (one SQL transaction,
one Lua script, one DynamoDB transaction or its fenced chunks). What a transition does to
a step and to a step's job is said here once:

========================  ==============================================================
operation                 what storage does
========================  ==============================================================
:class:`SetStep`          the step's state and reason; a storage that counts steps by
                          state moves one from ``was`` to ``state``; a success lowers
                          the unmet-dependency count of each of ``dependents``
:class:`SetExecution`     the execution's state, reason, blamed step and deadline
:class:`Started`          ``started_at = now``; with a deadline, the reaper's index
:class:`Finished`         ``finished_at = now``; out of the deadline index, into prune's;
                          with execution concurrency: its place frees, then
                          :func:`~.decide.promote` (each promoted execution is started
                          with :func:`start_ops`); a workflow's event waiters are
                          dropped; a sub-execution (``parent_id`` set) ends its parent's
                          step (:func:`~.workflow.sub_step_state`, then the parent's
                          step end, as a child job's end) in the same operation
:class:`EndJob`           the step's job, if it is ``when``: ends ``state``/``reason``
                          (a running one: its attempt ends ``outcome``/``reason``, fenced,
                          lease and concurrency slot freed, reported as a ``ReapedJob``);
                          a step standing for a sub-execution: that execution is
                          cancelled (:func:`~.decide.cancel`)
:class:`RequestCancel`    the step's job, if running: its cancel request is set; a step
                          standing for a sub-execution: that execution is cancelled
:class:`Release`          the step's job (stored at start, id ``step_job_id``) is
                          enqueued, ``queued``, with ``flow_deadline_at``; a second
                          release of a queued or running job is a no-op; a *finished* job
                          (a step put back by :func:`~.workflow.resume`) runs again:
                          ``queued`` ready now, ``max_attempts`` = its attempts so far +
                          the budget it was stored with, reason, result and error cleared,
                          its dead-letter entry removed, its attempt records kept
------------------------  --------------------------------------------------------------
*workflows (SPEC §12)*
:class:`PutMemo`          store memo ``key`` (a new key takes the execution's next memo
                          number; replacing a value keeps it; ``at = now``)
:class:`DropMemos`        delete these memos
:class:`AddStep`          a step added at run time: stored ``state`` with ``job_id`` =
                          ``job.id``; ``job`` (a child) is enqueued now as ``enqueue``
                          would; ``job`` ``None``: the step stands for a sub-execution
:class:`SetReady`         the step's job, if ``queued``, becomes ready at ``at``
                          (:data:`~queue_core.records.workflows.PARKED_AT`: never, until
                          a wake-up)
:class:`Wake`             the step's job, if ``queued``, becomes ready now (and idle
                          workers are woken as for an enqueue)
:class:`SetAwaiting`      the execution's awaited children are ``idxs``
:class:`AddWaiter`        index the event wait for ``send_event`` (replacing one with the
                          same ``memo_key``)
:class:`DropWaiter`       remove the execution's event wait ``memo_key``
:class:`Reopened`         a finished execution is active again: ``finished_at`` cleared,
                          out of prune's index, back in its concurrency key's set
:class:`SetUnmet`         the step's unmet-dependency counter (storages keeping one)
========================  ==============================================================

The order is fixed: the event's own step, the execution's fields, ``Started``,
``Finished``, timed-out steps, stopped steps (a superseded execution's running ones:
``cancelled``, their jobs ended ``cancelled``), ``not_run`` steps, cancel requests,
releases, then a workflow's awaited children and wake-ups. The plans of a workflow's
suspension, of an event's delivery and of a resume are built by :mod:`.workflow` from the
same operations.

Storages that record a step's end as an event and judge the execution later (Redis,
DynamoDB) fold those events with :func:`fold`, the one folding rule; :func:`fold_fast` is
the same fold from the counters :func:`step_end` reads, for the common case (the same
operations, or ``None``: fold on the full view). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, NewJob, Outcome, Reason
from queue_core.records.workflows import EventWait
from queue_core.rules.flows import decide
from queue_core.rules.flows.decide import Admission, ExecutionView, StepView, Transition
from queue_core.rules.flows.decide_fast import (
    ExecutionHead,
    StepIndex,
    step_ended_fast,
    step_index,
)

__all__ = [
    "AddStep",
    "AddWaiter",
    "DropMemos",
    "DropWaiter",
    "EndJob",
    "Finished",
    "Op",
    "PutMemo",
    "Release",
    "Reopened",
    "RequestCancel",
    "SetAwaiting",
    "SetExecution",
    "SetReady",
    "SetStep",
    "SetUnmet",
    "Started",
    "Wake",
    "claim_ops",
    "index_of",
    "ops",
    "start_ops",
    "step_end",
    "supersede_ops",
]

_S = StepState


@dataclass(frozen=True, slots=True)
class SetStep:
    """Step ``step`` (definition index ``idx``) takes ``state`` with ``reason``."""

    step: str
    idx: int
    state: StepState
    reason: str | None
    was: StepState
    """Its state before (a storage keeping counts of steps by state moves one over)."""
    dependents: tuple[int, ...] = ()
    """Set on a success: each of these steps has one unmet dependency less."""


@dataclass(frozen=True, slots=True)
class SetExecution:
    """The execution's fields after the decision."""

    state: ExecutionState
    reason: ExecutionReason | None
    failed_step: str | None
    deadline_at: int | None


@dataclass(frozen=True, slots=True)
class Started:
    """The execution left ``queued`` now: ``started_at = now``; a ``deadline_at`` goes
    into the index the reaper reads."""

    deadline_at: int | None


@dataclass(frozen=True, slots=True)
class Finished:
    """The execution reached a final state now: ``finished_at = now``; out of the deadline
    index and into prune's; with execution concurrency its place frees and the flow's
    queued executions are promoted (:func:`~.decide.promote`, then :func:`start_ops`)."""


@dataclass(frozen=True, slots=True)
class EndJob:
    """Step ``step``'s job, if its state is ``when``, ends ``state`` with ``reason``.

    ``when`` ``queued`` (a ``not_run`` step): the job leaves the ready set, unclaimed.
    ``when`` ``running`` (the flow's deadline): the current attempt ends ``outcome`` with
    ``reason`` (fenced: the worker's later finish is refused), the lease and the
    concurrency slot are freed, and storage reports it as a ``ReapedJob``. A job in any
    other state (or not released yet) is left alone.
    """

    step: str
    idx: int
    when: JobState
    state: JobState
    reason: str
    outcome: Outcome | None


@dataclass(frozen=True, slots=True)
class RequestCancel:
    """Step ``step``'s job, if running, gets a cancel request; it stays ``running`` until
    the worker (or the reaper at lease expiry) ends its attempt ``cancelled``."""

    step: str
    idx: int


@dataclass(frozen=True, slots=True)
class Release:
    """Step ``step``'s job (stored at start) is enqueued now, ``queued``, ready at
    ``now + delay``, with ``flow_deadline_at = deadline_at``. A second release of the
    same step is a no-op (its job id is ``step_job_id(execution, idx)``)."""

    step: str
    idx: int
    deadline_at: int | None


@dataclass(frozen=True, slots=True)
class PutMemo:
    """Store memo ``key`` of the execution (see the table in the module docstring)."""

    key: str
    value: bytes


@dataclass(frozen=True, slots=True)
class DropMemos:
    """Delete these memos of the execution (a replay)."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AddStep:
    """Step ``idx`` (the next index) is added at run time in ``state``: a child job
    (``job`` enqueued now, ``queued``) or a step standing for a sub-execution (``job``
    ``None``; its state follows the sub-execution's)."""

    step: str
    idx: int
    state: StepState
    job: NewJob | None


@dataclass(frozen=True, slots=True)
class SetReady:
    """Step ``step``'s job, if ``queued``, becomes ready at ``at`` (epoch ms)."""

    step: str
    idx: int
    at: int


@dataclass(frozen=True, slots=True)
class Wake:
    """Step ``step``'s job, if ``queued``, becomes ready now."""

    step: str
    idx: int


@dataclass(frozen=True, slots=True)
class SetAwaiting:
    """The execution's awaited children (a workflow's suspended function waits for all)."""

    steps: tuple[str, ...]
    idxs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AddWaiter:
    """Index this event wait of the execution for ``send_event``."""

    wait: EventWait


@dataclass(frozen=True, slots=True)
class DropWaiter:
    """Remove the execution's event wait ``memo_key`` (delivered)."""

    memo_key: str


@dataclass(frozen=True, slots=True)
class Reopened:
    """A finished execution is active again (a resume): ``finished_at`` cleared, out of
    prune's index, back among its concurrency key's active executions."""


@dataclass(frozen=True, slots=True)
class SetUnmet:
    """Step ``step``'s counter of dependencies not succeeded is ``unmet``."""

    step: str
    idx: int
    unmet: int


Op = (
    SetStep
    | SetExecution
    | Started
    | Finished
    | EndJob
    | RequestCancel
    | Release
    | PutMemo
    | DropMemos
    | AddStep
    | SetReady
    | Wake
    | SetAwaiting
    | AddWaiter
    | DropWaiter
    | Reopened
    | SetUnmet
)
"""One storage operation of a plan."""

_NOT_RUN_JOB = Reason.NOT_RUN.value
_FLOW_TIMEOUT = Reason.FLOW_TIMEOUT.value
_SUPERSEDED = Reason.SUPERSEDED.value


def ops(
    t: Transition,
    index: StepIndex,
    prior: Callable[[str], StepState],
    reasons: Mapping[str, str | None] | None = None,
) -> list[Op]:
    """The operations that apply ``t``, in the fixed order.

    Args:
        t: the decision.
        index: the execution's steps (positions and dependents).
        prior: each step's state before ``t`` (called for the steps ``t`` changes).
        reasons: the reason of the event's own step change (its job's reason).
    """
    pos = index.pos
    out: list[Op] = []
    now_state: dict[str, StepState] = {}  # a step set twice (a retry, then not_run)

    def was(sid: str) -> StepState:
        return now_state[sid] if sid in now_state else prior(sid)

    for sid, state in t.ended:
        i = pos[sid]
        deps = index.dependents[i] if state is _S.SUCCEEDED else ()
        out.append(SetStep(sid, i, state, (reasons or {}).get(sid), was(sid), deps))
        now_state[sid] = state
    out.append(SetExecution(t.state, t.reason, t.failed_step, t.deadline_at))
    if t.started:
        out.append(Started(t.deadline_at))
    if t.finished:
        out.append(Finished())
    for sid in t.time_out:
        i = pos[sid]
        out.append(SetStep(sid, i, _S.TIMED_OUT, _FLOW_TIMEOUT, was(sid)))
        out.append(
            EndJob(sid, i, JobState.RUNNING, JobState.TIMED_OUT, _FLOW_TIMEOUT, Outcome.TIMED_OUT)
        )
    for sid in t.stop:  # only a superseding cancel stops steps
        i = pos[sid]
        out.append(SetStep(sid, i, _S.CANCELLED, _SUPERSEDED, was(sid)))
        out.append(
            EndJob(sid, i, JobState.RUNNING, JobState.CANCELLED, _SUPERSEDED, Outcome.CANCELLED)
        )
    why = None if t.not_run_reason is None else t.not_run_reason.value
    for sid in t.not_run:
        i = pos[sid]
        out.append(SetStep(sid, i, _S.NOT_RUN, why, was(sid)))
        out.append(EndJob(sid, i, JobState.QUEUED, JobState.CANCELLED, _NOT_RUN_JOB, None))
    out += [RequestCancel(sid, pos[sid]) for sid in t.cancel]
    for sid in t.release:
        i = pos[sid]
        out.append(SetStep(sid, i, _S.QUEUED, None, was(sid)))
        out.append(Release(sid, i, t.deadline_at))
    if t.awaiting is not None:
        out.append(SetAwaiting(t.awaiting, tuple(pos[a] for a in t.awaiting)))
    out += [Wake(sid, pos[sid]) for sid in t.wake]
    return out


def _view_prior(view: ExecutionView) -> Callable[[str], StepState]:
    states = {s.id: s.state for s in view.steps}
    return states.__getitem__


def start_ops(view: ExecutionView, index: StepIndex, admission: Admission, now: int) -> list[Op]:
    """What storage writes for a new execution admitted ``admission``
    (:func:`~.decide.admit`), besides the execution and its steps stored ``pending``.

    ``skipped``: every step ``not_run`` (``concurrency_limit``), the execution finished.
    ``queued``: only its state. ``running``: :func:`~.decide.start` (its deadline, its
    first releases). ``view`` is the execution as stored: ``queued``, steps ``pending``.
    """
    if admission.state is ExecutionState.SKIPPED:
        why = admission.reason or ExecutionReason.CONCURRENCY_LIMIT
        out: list[Op] = [
            SetStep(s.id, i, _S.NOT_RUN, why.value, s.state) for i, s in enumerate(view.steps)
        ]
        return [*out, SetExecution(admission.state, why, None, None), Finished()]
    if admission.state is not ExecutionState.RUNNING:
        return [SetExecution(admission.state, admission.reason, None, None)]
    return ops(decide.start(view, now), index, _view_prior(view))


def supersede_ops(
    view: ExecutionView, index: StepIndex, behavior: str, now: int
) -> tuple[Transition | None, list[Op]]:
    """What storage writes for an execution a new one superseded
    (:attr:`~.decide.Admission.supersede`), applied before the new one is stored.

    ``latest``: the queued execution ends ``skipped``, reason ``superseded``, its steps
    ``not_run`` (as :func:`start_ops` of a skipped admission). ``cancel_in_progress``:
    :func:`~.decide.cancel` with reason ``superseded`` (the transition is returned too, for
    a storage that checks its view against :func:`~.decide.apply`).
    """
    if behavior == "latest":
        skip = Admission(ExecutionState.SKIPPED, ExecutionReason.SUPERSEDED)
        return None, start_ops(view, index, skip, now)
    t = decide.cancel(view, now, ExecutionReason.SUPERSEDED)
    return t, ops(t, index, _view_prior(view))


def claim_ops(index: StepIndex, step_id: str, head: ExecutionHead | None = None) -> list[Op]:
    """A step's job was claimed: the step is ``running`` (it was ``queued``); a
    ``waiting`` workflow (``head``) whose function step (index 0) was claimed is
    ``running`` again."""
    idx = index.pos[step_id]
    out: list[Op] = [SetStep(step_id, idx, _S.RUNNING, None, _S.QUEUED)]
    if idx == 0 and head is not None and head.state is ExecutionState.WAITING:
        h = head
        out.append(SetExecution(ExecutionState.RUNNING, h.reason, h.failed_step, h.deadline_at))
    return out


def step_end(
    head: ExecutionHead,
    index: StepIndex,
    counts: Mapping[StepState, int],
    step_id: str,
    current: StepState,
    state: StepState,
    dependents: Callable[[], Mapping[str, tuple[StepState, int]]],
    full: Callable[[], ExecutionView],
    now: int,
    reason: str | None = None,
) -> tuple[Transition, list[Op]]:
    """The decision and the plan of step ``step_id``'s job changing to ``state``.

    Decided from O(dependents) data when :func:`~.decide_fast.step_ended_fast` applies
    (``head``, ``counts`` of steps by state, and -- for a success -- ``dependents()``: each
    dependent's state and unmet count); otherwise from ``full()``, the whole execution,
    by :func:`~.decide.step_ended`. One choice, made here for every backend.
    """
    deps = dependents() if state is _S.SUCCEEDED else {}
    fast = step_ended_fast(head, index, counts, step_id, current, state, deps, now)
    reasons = {step_id: reason}
    if fast is not None:

        def prior(sid: str) -> StepState:
            return current if sid == step_id else _S.PENDING  # the fast path only releases

        return fast, ops(fast, index, prior, reasons)
    view = full()
    t = decide.step_ended(view, step_id, state, now)
    return t, ops(t, index, _view_prior(view), reasons)


def index_of(steps: Sequence[StepView]) -> StepIndex:
    """The :class:`~.decide_fast.StepIndex` of an execution's steps."""
    return step_index([(s.id, s.depends_on) for s in steps])

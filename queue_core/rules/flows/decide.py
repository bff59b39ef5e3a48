"""The decisions of a flow execution, as pure functions storage applies atomically (SPEC §7).

No I/O, no clock: ``now`` (epoch milliseconds, by the storage's clock) is an argument.
Every backend calls these functions (memory, SQL), or mirrors them line by line and says
so (Redis Lua, the DynamoDB release batches); the contract suite pins the cases.

The model is a small state machine over plain data:

- an :class:`ExecutionView` is what storage holds for one execution: its state, reason,
  the blamed step, its deadline, ``max_parallel``, and each step's state and
  dependencies, in definition order;
- an event (:func:`start`, :func:`step_ended`, :func:`cancel`, or plain :func:`advance`
  when the reaper looks at the deadline) returns a :class:`Transition`: the execution's
  new fields and what to do to which steps. Storage applies one transition in the same
  transaction / script as the event that caused it; :func:`apply` is the reference.

The rules of :func:`advance`, in the order they are judged (Lua mirrors this order):

1. ``queued`` or a final state: nothing happens (a queued execution starts only by
   :func:`start`).
2. ``cancelling``: pending and queued steps end ``not_run`` (reason ``cancelled``, or the
   execution's ``superseded``); once no step is ``running`` the execution ends
   ``cancelled`` with that reason.
3. ``running`` past its deadline (``now >= deadline_at``), or with a step that ended
   ``timed_out`` (only the deadline ends a step so): the execution ends ``timed_out``
   (``flow_timeout``) at once; running steps end ``timed_out`` (their attempts
   ``timed_out``/``flow_timeout``, not retried), pending and queued ones ``not_run``.
4. ``running`` with a step that ended without succeeding (``dead``, ``cancelled``,
   ``skipped``, ``not_run``) — the first such step in definition order is blamed and
   remembered as ``failed_step``: pending and queued steps (retries waiting in backoff
   included) end ``not_run`` (``step_failed``); once no step is ``running`` the execution
   ends ``failed`` (``step_failed``, naming the step).
5. ``running`` with every step ``succeeded``: the execution ends ``succeeded``.
6. Otherwise the pending steps whose dependencies all succeeded are released (their
   jobs are enqueued), in definition order; with ``max_parallel = N > 0`` only
   ``N - (queued + running)`` of them, the rest stay ``pending``. A queued step (ready,
   or waiting in a retry backoff) holds its place, so ``running`` never exceeds ``N``
   whatever the claimers do.

A ``waiting`` execution (a workflow whose function is suspended, SPEC §12) is judged as a
``running`` one. A workflow (``kind == "workflow"``) follows rules 1-3 (rule 3 for its
deadline only) and then its own, since its steps are its function step (index 0) and the
children the function added at run time:

W4. the function step ``succeeded``: the execution ends ``succeeded``;
W5. the function step ended without succeeding: the execution ends ``failed``
    (``step_failed``, naming the function step);
W6. otherwise pending steps are released as in rule 6 (the function step at start, and
    the steps a :func:`~queue_core.rules.flows.workflow.resume` put back).

A child's end never fails a workflow by itself (the function sees it), and children the
function does not wait for are left to run. A child that finishes while the function
waits for it (``awaiting``) leaves the awaited set; when the set empties the function
step's job is woken (:attr:`Transition.wake`).

Execution concurrency (:func:`admit` at start, :func:`promote` after an execution ends)
is judged over the executions of one flow (and one key value).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.rules.flows.spec import ConcurrencySpec

__all__ = [
    "WORKFLOW",
    "Admission",
    "ExecutionSlot",
    "ExecutionView",
    "StepView",
    "Transition",
    "admit",
    "advance",
    "apply",
    "cancel",
    "free_places",
    "may_release",
    "promote",
    "start",
    "step_ended",
]

_E = ExecutionState
_S = StepState
_BLOCKING = frozenset({_S.DEAD, _S.CANCELLED, _S.SKIPPED, _S.NOT_RUN})
"""Final step states other than success and ``timed_out`` that leave dependents unable to run."""
_WAITING = frozenset({_S.PENDING, _S.QUEUED})
_ACTIVE = frozenset({_E.RUNNING, _E.WAITING, _E.CANCELLING})
"""Execution states that hold a concurrency place."""
WORKFLOW = "workflow"
"""The ``kind`` of a workflow execution (SPEC §12); a flow's is ``"flow"``."""


@dataclass(frozen=True, slots=True)
class StepView:
    """One step as the decisions see it."""

    id: str
    state: StepState
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionView:
    """The stored fields of one execution that the decisions read."""

    state: ExecutionState
    steps: tuple[StepView, ...]
    """Every step, in definition order (the order releases follow)."""
    max_parallel: int = 0
    """At most this many steps ``running`` (``0`` = no limit)."""
    timeout_ms: int | None = None
    """The execution timeout; :func:`start` turns it into ``deadline_at``."""
    deadline_at: int | None = None
    """Epoch ms after which no step may run; set when the execution starts running."""
    reason: ExecutionReason | None = None
    failed_step: str | None = None
    """The step blamed for ``step_failed`` (set while the execution is still running)."""
    kind: str = "flow"
    """``"flow"``, or ``"workflow"`` (:data:`WORKFLOW`): the rules of the module docstring."""
    awaiting: tuple[str, ...] = ()
    """A workflow: the child steps its suspended function waits for (all of them)."""

    def step_state(self, step_id: str) -> StepState:
        for s in self.steps:
            if s.id == step_id:
                return s.state
        raise KeyError(step_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """What storage must do, atomically with the event that produced it.

    The execution fields are the new values (equal to the old ones when unchanged).
    """

    state: ExecutionState
    reason: ExecutionReason | None
    failed_step: str | None
    deadline_at: int | None
    started: bool = False
    """The execution left ``queued`` now: store ``started_at = now`` and ``deadline_at``."""
    finished: bool = False
    """The execution reached a final state now: store ``finished_at = now`` and, with
    execution concurrency, :func:`promote` the flow's queued executions."""
    ended: tuple[tuple[str, StepState], ...] = ()
    """The step change of the event itself (:func:`step_ended`): the job's new state,
    which storage records with the attempt's end. Empty for other events."""
    release: tuple[str, ...] = ()
    """Pending steps that are ready now: create and enqueue their jobs (state ``queued``)."""
    not_run: tuple[str, ...] = ()
    """Pending or queued steps that end ``not_run`` with reason ``not_run_reason``; a
    queued step's job leaves the ready set and is never claimed."""
    not_run_reason: ExecutionReason | None = None
    time_out: tuple[str, ...] = ()
    """Running steps that end ``timed_out`` now: their current attempt ends ``timed_out``
    with reason ``flow_timeout`` (fenced: the worker's later finish is refused), no retry."""
    cancel: tuple[str, ...] = ()
    """Running steps whose jobs get a cancel request; they stay ``running`` until the
    worker (or the reaper, at lease expiry) ends their attempt ``cancelled``."""
    stop: tuple[str, ...] = ()
    """Running steps that end ``cancelled`` now, as a superseded job does (SPEC §13): their
    current attempt and job end ``cancelled``, reason ``superseded`` (only a superseding
    :func:`cancel` stops steps),
    fenced (the worker's later finish is refused; its body learns it at its next lease
    renewal)."""
    awaiting: tuple[str, ...] | None = None
    """A workflow: the awaited children afterwards; ``None``: unchanged."""
    wake: tuple[str, ...] = ()
    """A workflow: steps whose queued job becomes ready now (the function step, once the
    last awaited child finished)."""

    def changes(self, view: ExecutionView) -> bool:
        """``True`` when applying this transition to ``view`` writes anything."""
        return bool(
            self.started
            or self.finished
            or self.ended
            or self.release
            or self.not_run
            or self.time_out
            or self.cancel
            or self.stop
            or self.wake
            or (self.awaiting is not None and self.awaiting != view.awaiting)
        ) or (self.state, self.reason, self.failed_step, self.deadline_at) != (
            view.state,
            view.reason,
            view.failed_step,
            view.deadline_at,
        )


def _same(view: ExecutionView) -> Transition:
    return Transition(
        state=view.state,
        reason=view.reason,
        failed_step=view.failed_step,
        deadline_at=view.deadline_at,
    )


def _ids(view: ExecutionView, states: Iterable[StepState]) -> tuple[str, ...]:
    wanted = frozenset(states)
    return tuple(s.id for s in view.steps if s.state in wanted)


def advance(view: ExecutionView, now: int) -> Transition:
    """Judge an execution as it stands at ``now`` (rules 1-6 of the module docstring).

    Storage calls it after every event it records for the execution, and the reaper
    calls it for running executions whose ``deadline_at`` has passed.
    """
    if view.state is _E.QUEUED or view.state.finished:
        return _same(view)
    running = _ids(view, (_S.RUNNING,))
    waiting = _ids(view, _WAITING)
    if view.state is _E.CANCELLING:
        done = not running
        why = view.reason or ExecutionReason.CANCELLED  # or superseded
        return replace(
            _same(view),
            state=_E.CANCELLED if done else _E.CANCELLING,
            reason=why,
            finished=done,
            not_run=waiting,
            not_run_reason=why if waiting else None,
        )
    # running (or waiting)
    workflow = view.kind == WORKFLOW
    timed_out = not workflow and any(s.state is _S.TIMED_OUT for s in view.steps)
    if timed_out or (view.deadline_at is not None and now >= view.deadline_at):
        return replace(
            _same(view),
            state=_E.TIMED_OUT,
            reason=ExecutionReason.FLOW_TIMEOUT,
            failed_step=None,
            finished=True,
            time_out=running,
            not_run=waiting,
            not_run_reason=ExecutionReason.FLOW_TIMEOUT if waiting else None,
            awaiting=() if view.awaiting else None,
        )
    if workflow:
        return _advance_workflow(view)
    failed_step = view.failed_step
    if failed_step is None:
        failed_step = next((s.id for s in view.steps if s.state in _BLOCKING), None)
    if failed_step is not None:
        done = not running
        return replace(
            _same(view),
            state=_E.FAILED if done else _E.RUNNING,
            reason=ExecutionReason.STEP_FAILED if done else None,
            failed_step=failed_step,
            finished=done,
            not_run=waiting,
            not_run_reason=ExecutionReason.STEP_FAILED if waiting else None,
        )
    if all(s.state is _S.SUCCEEDED for s in view.steps):
        return replace(_same(view), state=_E.SUCCEEDED, reason=None, finished=True)
    return replace(_same(view), release=_ready(view))


def _advance_workflow(view: ExecutionView) -> Transition:
    """Rules W4-W6 of a running or waiting workflow (module docstring)."""
    function = view.steps[0]
    if function.state is _S.SUCCEEDED:
        done = replace(_same(view), state=_E.SUCCEEDED, reason=None, finished=True)
        return replace(done, awaiting=() if view.awaiting else None)
    if function.state.finished:
        return replace(
            _same(view),
            state=_E.FAILED,
            reason=ExecutionReason.STEP_FAILED,
            failed_step=function.id,
            finished=True,
            awaiting=() if view.awaiting else None,
        )
    return replace(_same(view), release=_ready(view))


def _ready(view: ExecutionView) -> tuple[str, ...]:
    succeeded = frozenset(_ids(view, (_S.SUCCEEDED,)))
    ready = [
        s.id
        for s in view.steps
        if s.state is _S.PENDING and all(d in succeeded for d in s.depends_on)
    ]
    occupied = sum(1 for s in view.steps if s.state in (_S.QUEUED, _S.RUNNING))
    places = free_places(view.max_parallel, occupied)
    return tuple(ready if places is None else ready[:places])


def free_places(max_parallel: int, occupied: int) -> int | None:
    """How many more steps of an execution may be released now; ``None`` = no limit.

    ``occupied`` counts the execution's ``queued`` and ``running`` steps (a retry waiting
    in backoff keeps its place). A storage that keeps ``occupied`` as a counter instead of
    reading every step (DynamoDB's release batches) calls this for the same answer.
    """
    if max_parallel <= 0:
        return None
    return max(0, max_parallel - occupied)


def may_release(
    state: ExecutionState, failed_step: str | None, deadline_at: int | None, now: int
) -> bool:
    """Whether an execution in this state may start any step at ``now``.

    ``True`` only while it is ``running`` (or ``waiting``), no step has failed it and its
    deadline has not passed: the condition every release must hold, including a release
    batch applied after the event that caused it (DynamoDB), which re-checks it on the
    stored fields.
    """
    return (
        state in (_E.RUNNING, _E.WAITING)
        and failed_step is None
        and (deadline_at is None or now < deadline_at)
    )


def start(view: ExecutionView, now: int) -> Transition:
    """A ``queued`` execution starts running at ``now``: its deadline is set, its first
    steps are released. Any other state: nothing happens."""
    if view.state is not _E.QUEUED:
        return _same(view)
    deadline = None if view.timeout_ms is None else now + view.timeout_ms
    running = replace(view, state=_E.RUNNING, deadline_at=deadline)
    return replace(advance(running, now), started=True, deadline_at=deadline)


def step_ended(view: ExecutionView, step_id: str, state: StepState, now: int) -> Transition:
    """A step's job changed state (its attempt ended, or storage ended it): what follows.

    ``state`` is the job's new state: ``succeeded``, ``dead``, ``cancelled``,
    ``skipped``, ``timed_out``, or ``queued`` when the attempt will be retried. Storage
    records the job's change and applies the returned transition in one atomic step: a
    step's success and the release of its dependents are never apart.

    A change to a step that already finished is ignored (its fencing should have refused
    it): the execution is judged as it stands. A workflow's child that finishes while the
    function waits for it leaves ``awaiting``; the last one wakes the function step.

    Raises:
        KeyError: ``step_id`` is not a step of the execution.
        ValueError: ``state`` is ``pending``, ``running`` or ``not_run`` (not a job's end).
    """
    if state in (_S.PENDING, _S.RUNNING, _S.NOT_RUN):
        raise ValueError(f"a step's job does not end {state.value!r}")
    current = view.step_state(step_id)
    if current.finished:
        return advance(view, now)
    view = replace(
        view,
        steps=tuple(
            StepView(s.id, state, s.depends_on) if s.id == step_id else s for s in view.steps
        ),
    )
    t = replace(advance(view, now), ended=((step_id, state),))
    if not state.finished or step_id not in view.awaiting or t.awaiting is not None:
        return t
    rest = tuple(a for a in view.awaiting if a != step_id)
    function = view.steps[0]
    wake = () if rest or function.state is not _S.QUEUED else (function.id,)
    return replace(t, awaiting=rest, wake=wake)


def cancel(
    view: ExecutionView, now: int, reason: ExecutionReason = ExecutionReason.CANCELLED
) -> Transition:
    """A cancel request: a queued, running or waiting execution is ``cancelling`` while its
    running steps are asked to stop (their attempts end ``cancelled``, not retried), then
    ``cancelled``; steps not started end ``not_run``. A cancelling or finished execution
    is left as it is (the transition ``changes`` nothing). ``reason``: ``cancelled``, or
    ``superseded`` when a ``cancel_in_progress`` execution took its place: then, as a
    superseded job (SPEC §13), the running steps' attempts and jobs end ``cancelled``,
    reason ``superseded``, at once (:attr:`Transition.stop`), and so does the execution."""
    if view.state not in (_E.QUEUED, _E.RUNNING, _E.WAITING):
        return _same(view)
    running = _ids(view, (_S.RUNNING,))
    cancelling = replace(view, state=_E.CANCELLING, reason=reason, failed_step=None)
    if reason is not ExecutionReason.SUPERSEDED:
        return replace(advance(cancelling, now), cancel=running)
    stopped = tuple(
        StepView(s.id, _S.CANCELLED, s.depends_on) if s.state is _S.RUNNING else s
        for s in view.steps
    )
    return replace(advance(replace(cancelling, steps=stopped), now), stop=running)


def apply(view: ExecutionView, t: Transition) -> ExecutionView:
    """The view after storage applied ``t`` (the reference for every backend).

    The event's own step change (``ended``) first; then released steps become
    ``queued``, ``not_run`` and ``time_out`` steps take those states, ``stop`` steps end
    ``cancelled``; ``cancel`` and ``wake`` change no step state (requests to the steps'
    jobs); ``awaiting`` replaces the awaited children when given.
    """
    new_state = dict(t.ended)
    new_state.update(dict.fromkeys(t.release, _S.QUEUED))
    new_state.update(dict.fromkeys(t.not_run, _S.NOT_RUN))
    new_state.update(dict.fromkeys(t.time_out, _S.TIMED_OUT))
    new_state.update(dict.fromkeys(t.stop, _S.CANCELLED))
    return replace(
        view,
        state=t.state,
        reason=t.reason,
        failed_step=t.failed_step,
        deadline_at=t.deadline_at,
        steps=tuple(StepView(s.id, new_state.get(s.id, s.state), s.depends_on) for s in view.steps),
        awaiting=view.awaiting if t.awaiting is None else t.awaiting,
    )


# --------------------------------------------------------------------------- concurrency


@dataclass(frozen=True, slots=True)
class ExecutionSlot:
    """Another execution of the same flow (and key), as concurrency sees it."""

    id: str
    state: ExecutionState
    created_at: int
    """Epoch ms; with ``id`` it orders the queue (oldest first)."""


@dataclass(frozen=True, slots=True)
class Admission:
    """How a new execution enters: ``running``, ``queued`` or ``skipped``.

    ``supersede``: executions of the same key the new one ends by arriving (SPEC §13),
    oldest first. ``cancel_in_progress``: storage applies :func:`cancel` with reason
    ``superseded`` to each (it ends ``cancelled`` at once, its running steps' jobs too).
    ``latest``: each is ``queued`` and ends ``skipped``, reason ``superseded`` (its steps
    ``not_run``), as a skipped admission would.
    """

    state: ExecutionState
    reason: ExecutionReason | None = None
    supersede: tuple[str, ...] = ()


def _oldest(slots: Sequence[ExecutionSlot], states: frozenset[ExecutionState]) -> list[str]:
    return [
        o.id for o in sorted(slots, key=lambda o: (o.created_at, o.id)) if o.state in states
    ]


def admit(concurrency: ConcurrencySpec | None, others: Sequence[ExecutionSlot]) -> Admission:
    """The state of a new execution, given the flow's other executions (same key).

    - no concurrency: ``running``;
    - ``skip``: ``skipped`` (``concurrency_limit``) when ``limit`` executions are
      ``queued``/``running``/``waiting``/``cancelling``, else ``running``;
    - ``queue`` and ``round_robin`` (whose step jobs are, besides, claimed in turns over
      the flow's keys): ``running`` when fewer than ``limit`` are active (``running``,
      ``waiting``, ``cancelling``) and none is ``queued`` (older executions go first),
      else ``queued``;
    - ``cancel_in_progress``: ``running`` at once; when ``limit`` or more are ``queued``,
      ``running`` or ``waiting`` (a ``cancelling`` one is on its way out), the oldest of
      them are superseded so that the new one makes ``limit``;
    - ``latest``: as ``queue``, and a ``queued`` one it finds is superseded (skipped): at
      most one waits per key, the newest.

    Storage judges this in the same transaction / script that inserts the execution.
    """
    if concurrency is None:
        return Admission(_E.RUNNING)
    active = sum(1 for o in others if o.state in _ACTIVE)
    queued = sum(1 for o in others if o.state is _E.QUEUED)
    behavior, limit = concurrency.behavior, concurrency.limit
    if behavior == "skip":
        if active + queued >= limit:
            return Admission(_E.SKIPPED, ExecutionReason.CONCURRENCY_LIMIT)
        return Admission(_E.RUNNING)
    if behavior == "cancel_in_progress":
        live = _oldest(others, frozenset({_E.QUEUED, _E.RUNNING, _E.WAITING}))
        return Admission(_E.RUNNING, supersede=tuple(live[: max(0, len(live) - limit + 1)]))
    if active < limit and queued == 0:
        return Admission(_E.RUNNING)
    if behavior == "latest":
        return Admission(_E.QUEUED, supersede=tuple(_oldest(others, frozenset({_E.QUEUED}))))
    return Admission(_E.QUEUED)


def promote(
    concurrency: ConcurrencySpec | None, executions: Sequence[ExecutionSlot]
) -> tuple[str, ...]:
    """The queued executions to :func:`start` now, oldest first (``created_at``, then id).

    As many as there are free places (``limit`` minus the active ones); every
    queued one when the flow has no concurrency. Storage calls it in the transaction that
    ends an execution (and the reaper calls it, so a lost promotion is retried).
    """
    queued = sorted(
        (e for e in executions if e.state is _E.QUEUED), key=lambda e: (e.created_at, e.id)
    )
    if concurrency is None:
        return tuple(e.id for e in queued)
    active = sum(1 for e in executions if e.state in _ACTIVE)
    free = max(0, concurrency.limit - active)
    return tuple(e.id for e in queued[:free])

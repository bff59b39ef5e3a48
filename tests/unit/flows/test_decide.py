"""queue_core.rules.flows.decide: the execution state machine as tables of inputs (SPEC §7).

Steps are written ``id<dep1,dep2=state`` (``<deps`` optional), in definition order.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome
from queue_core.rules.flows import plan
from queue_core.rules.flows.decide import (
    Admission,
    ExecutionSlot,
    ExecutionView,
    StepView,
    Transition,
    admit,
    advance,
    apply,
    cancel,
    free_places,
    may_release,
    promote,
    start,
    step_ended,
)
from queue_core.rules.flows.spec import ConcurrencySpec

E = ExecutionState
S = StepState
R = ExecutionReason
NOW = 1_000_000


def steps(text: str) -> tuple[StepView, ...]:
    out = []
    for item in text.split():
        head, state = item.split("=")
        sid, _, deps = head.partition("<")
        out.append(StepView(sid, S(state), tuple(d for d in deps.split(",") if d)))
    return tuple(out)


def view(text: str, state: E = E.RUNNING, **kw: object) -> ExecutionView:
    return ExecutionView(state=state, steps=steps(text), **kw)  # type: ignore[arg-type]


DIAMOND = "a=pending b<a=pending c<a=pending d<b,c=pending"


# --------------------------------------------------------------------------- releases


@pytest.mark.parametrize(
    ("text", "max_parallel", "release"),
    [
        # diamond: a first, then b and c together, d only after both
        ("a=pending b<a=pending c<a=pending d<b,c=pending", 0, ("a",)),
        ("a=succeeded b<a=pending c<a=pending d<b,c=pending", 0, ("b", "c")),
        ("a=succeeded b<a=succeeded c<a=running d<b,c=pending", 0, ()),
        ("a=succeeded b<a=succeeded c<a=succeeded d<b,c=pending", 0, ("d",)),
        # a queued retry of a dependency does not release its dependents
        ("a=queued b<a=pending", 0, ()),
        # max_parallel: queued + running hold places; extras stay pending, definition order
        ("a=pending b=pending c=pending d=pending e=pending f=pending", 2, ("a", "b")),
        ("a=running b=running c=pending d=pending", 2, ()),
        ("a=succeeded b=running c=pending d=pending", 2, ("c",)),
        ("a=queued b=running c=pending", 2, ()),  # a retry waiting in backoff keeps its place
        ("a=succeeded b=succeeded c=pending d=pending e=pending", 2, ("c", "d")),
        ("a=running b=running c=running d=pending", 2, ()),  # never negative
        ("z=pending y=pending x=pending", 1, ("z",)),  # definition order, not alphabetical
    ],
)
def test_ready_steps(text: str, max_parallel: int, release: tuple[str, ...]) -> None:
    t = advance(view(text, max_parallel=max_parallel), NOW)
    assert t.release == release
    assert t.state is E.RUNNING and not t.finished and not t.not_run


def test_start_sets_the_deadline_and_releases_the_roots() -> None:
    v = view(DIAMOND, state=E.QUEUED, timeout_ms=1500)
    t = start(v, NOW)
    assert t == Transition(
        state=E.RUNNING, reason=None, failed_step=None, deadline_at=NOW + 1500,
        started=True, release=("a",),
    )
    assert apply(v, t).steps[0].state is S.QUEUED


def test_start_without_timeout_has_no_deadline_and_ignores_a_started_execution() -> None:
    assert start(view(DIAMOND, state=E.QUEUED), NOW).deadline_at is None
    running = view(DIAMOND, deadline_at=5)
    t = start(running, NOW)
    assert not t.changes(running) and t.release == ()


def test_queued_and_finished_executions_release_nothing() -> None:
    for state in (E.QUEUED, E.SUCCEEDED, E.FAILED, E.TIMED_OUT, E.CANCELLED, E.SKIPPED):
        v = view(DIAMOND, state=state)
        t = advance(v, NOW)
        assert not t.changes(v), state


@pytest.mark.parametrize(
    ("max_parallel", "occupied", "places"),
    [(0, 0, None), (0, 99, None), (2, 0, 2), (2, 1, 1), (2, 2, 0), (2, 5, 0), (1, 0, 1)],
)
def test_free_places(max_parallel: int, occupied: int, places: int | None) -> None:
    assert free_places(max_parallel, occupied) == places


@pytest.mark.parametrize(
    ("state", "failed_step", "deadline_at", "allowed"),
    [
        (E.RUNNING, None, None, True),
        (E.RUNNING, None, NOW + 1, True),
        (E.RUNNING, None, NOW, False),
        (E.RUNNING, "a", None, False),
        (E.QUEUED, None, None, False),
        (E.CANCELLING, None, None, False),
        (E.SUCCEEDED, None, None, False),
        (E.TIMED_OUT, None, None, False),
    ],
)
def test_may_release(
    state: E, failed_step: str | None, deadline_at: int | None, allowed: bool
) -> None:
    assert may_release(state, failed_step, deadline_at, NOW) is allowed
    # the same judgement as advance(): a ready step is released exactly when allowed
    v = view("a=succeeded b<a=pending", state=state, failed_step=failed_step,
             deadline_at=deadline_at)
    assert (advance(v, NOW).release == ("b",)) is allowed


# --------------------------------------------------------------------------- step ends


@pytest.mark.parametrize(
    ("text", "step", "ended", "expected"),
    [
        # success releases dependents in the same transition
        ("a=running b<a=pending c<a=pending", "a", S.SUCCEEDED,
         dict(state=E.RUNNING, release=("b", "c"))),
        # last success ends the execution
        ("a=succeeded b<a=running", "b", S.SUCCEEDED,
         dict(state=E.SUCCEEDED, finished=True)),
        # a retry: the step is queued again, nothing else happens
        ("a=running b<a=pending", "a", S.QUEUED, dict(state=E.RUNNING)),
        # dead with a sibling running: stays running, blames the step, dependents not_run
        ("a=succeeded b<a=running c<a=running d<b,c=pending", "b", S.DEAD,
         dict(state=E.RUNNING, failed_step="b", not_run=("d",), not_run_reason=R.STEP_FAILED)),
        # dead with queued steps (a retry in backoff) and nothing running: failed at once
        ("a=running b=queued c<a=pending", "a", S.DEAD,
         dict(state=E.FAILED, reason=R.STEP_FAILED, failed_step="a", finished=True,
              not_run=("b", "c"), not_run_reason=R.STEP_FAILED)),
        # a step cancelled on its own (jobs cancel) blocks its dependents: step_failed
        ("a=running b<a=pending", "a", S.CANCELLED,
         dict(state=E.FAILED, reason=R.STEP_FAILED, failed_step="a", finished=True,
              not_run=("b",), not_run_reason=R.STEP_FAILED)),
        # a step ended timed_out means the deadline passed (worker clock ahead of storage's)
        ("a=running b=running c<a=pending", "a", S.TIMED_OUT,
         dict(state=E.TIMED_OUT, reason=R.FLOW_TIMEOUT, finished=True, time_out=("b",),
              not_run=("c",), not_run_reason=R.FLOW_TIMEOUT)),
    ],
)
def test_step_end_table(text: str, step: str, ended: S, expected: dict[str, object]) -> None:
    v = view(text)
    t = step_ended(v, step, ended, NOW)
    expected.setdefault("ended", ((step, ended),))
    want = Transition(
        state=expected.pop("state"),  # type: ignore[arg-type]
        reason=expected.pop("reason", None),  # type: ignore[arg-type]
        failed_step=expected.pop("failed_step", None),  # type: ignore[arg-type]
        deadline_at=None,
        **expected,  # type: ignore[arg-type]
    )
    assert t == want


def test_failing_execution_ends_failed_when_the_last_running_sibling_ends() -> None:
    v = view("a=succeeded b<a=dead c<a=running d<b,c=not_run", failed_step="b")
    # the sibling still running changes nothing
    assert advance(v, NOW) == Transition(
        state=E.RUNNING, reason=None, failed_step="b", deadline_at=None
    )
    # its success releases nothing and ends the execution failed, blaming b
    t = step_ended(v, "c", S.SUCCEEDED, NOW)
    assert (t.state, t.reason, t.failed_step, t.finished, t.release) == (
        E.FAILED, R.STEP_FAILED, "b", True, ()
    )


def test_failing_execution_turns_a_retry_into_not_run() -> None:
    v = view("a=dead b=running", failed_step="a")
    t = step_ended(v, "b", S.QUEUED, NOW)  # b failed an attempt and would be retried
    assert (t.state, t.not_run, t.finished) == (E.FAILED, ("b",), True)


def test_the_first_blocking_step_is_blamed_even_if_a_later_one_died_first() -> None:
    # two dead steps seen at once: definition order decides, and it sticks afterwards
    v = view("a=dead b=dead c=running")
    t = advance(v, NOW)
    assert t.failed_step == "a"
    later = step_ended(apply(v, t), "c", S.DEAD, NOW)
    assert (later.state, later.failed_step) == (E.FAILED, "a")


def test_an_end_reported_for_a_finished_step_is_ignored() -> None:
    v = view("a=timed_out b=not_run", state=E.TIMED_OUT, reason=R.FLOW_TIMEOUT)
    t = step_ended(v, "a", S.SUCCEEDED, NOW)
    assert not t.changes(v)


@pytest.mark.parametrize("bad", [S.PENDING, S.RUNNING, S.NOT_RUN])
def test_step_end_refuses_states_that_are_not_job_ends(bad: S) -> None:
    with pytest.raises(ValueError, match=bad.value):
        step_ended(view("a=running"), "a", bad, NOW)


def test_step_end_of_an_unknown_step_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        step_ended(view("a=running"), "zz", S.SUCCEEDED, NOW)


# --------------------------------------------------------------------------- deadline


@pytest.mark.parametrize(
    ("now", "timed_out"),
    [(NOW + 1499, False), (NOW + 1500, True), (NOW + 99_999, True)],
)
def test_deadline_boundary(now: int, timed_out: bool) -> None:
    v = view("a=running b=queued c<a=pending", deadline_at=NOW + 1500)
    t = advance(v, now)
    if timed_out:
        assert t == Transition(
            state=E.TIMED_OUT, reason=R.FLOW_TIMEOUT, failed_step=None,
            deadline_at=NOW + 1500, finished=True, time_out=("a",),
            not_run=("b", "c"), not_run_reason=R.FLOW_TIMEOUT,
        )
    else:
        assert not t.changes(v)


def test_deadline_starts_nothing_even_when_a_success_would_release() -> None:
    v = view("a=running b<a=pending", deadline_at=NOW)
    t = step_ended(v, "a", S.SUCCEEDED, NOW + 1)
    assert (t.state, t.release, t.not_run, t.time_out) == (E.TIMED_OUT, (), ("b",), ())


def test_deadline_beats_a_failing_execution_and_clears_the_blame() -> None:
    v = view("a=dead b=running", failed_step="a", deadline_at=NOW)
    t = advance(v, NOW)
    assert (t.state, t.reason, t.failed_step, t.time_out) == (
        E.TIMED_OUT, R.FLOW_TIMEOUT, None, ("b",)
    )


def test_deadline_does_not_override_a_cancel_in_progress() -> None:
    v = view("a=running", state=E.CANCELLING, reason=R.CANCELLED, deadline_at=NOW)
    t = advance(v, NOW + 10)
    assert (t.state, t.time_out) == (E.CANCELLING, ())


# --------------------------------------------------------------------------- cancel


def test_cancel_running_execution_is_cancelling_until_running_steps_end() -> None:
    v = view("a=succeeded b<a=running c<a=queued d<b,c=pending")
    t = cancel(v, NOW)
    assert t == Transition(
        state=E.CANCELLING, reason=R.CANCELLED, failed_step=None, deadline_at=None,
        cancel=("b",), not_run=("c", "d"), not_run_reason=R.CANCELLED,
    )
    after = apply(v, t)
    assert [s.state for s in after.steps] == [S.SUCCEEDED, S.RUNNING, S.NOT_RUN, S.NOT_RUN]
    # b's attempt ends cancelled: the execution is cancelled
    end = step_ended(after, "b", S.CANCELLED, NOW + 5)
    assert (end.state, end.reason, end.finished) == (E.CANCELLED, R.CANCELLED, True)


def test_cancelling_turns_a_retry_into_not_run_and_a_success_releases_nothing() -> None:
    v = view("a=running b=running c<a=pending", state=E.CANCELLING, reason=R.CANCELLED)
    t = step_ended(v, "a", S.SUCCEEDED, NOW)
    assert (t.state, t.release) == (E.CANCELLING, ())
    t2 = step_ended(apply(v, t), "b", S.QUEUED, NOW)
    assert (t2.state, t2.not_run, t2.finished) == (E.CANCELLED, ("b",), True)


def test_cancel_queued_execution_ends_at_once_with_every_step_not_run() -> None:
    v = view("a=pending b<a=pending", state=E.QUEUED)
    t = cancel(v, NOW)
    assert (t.state, t.reason, t.finished, t.not_run, t.cancel) == (
        E.CANCELLED, R.CANCELLED, True, ("a", "b"), ()
    )


@pytest.mark.parametrize("state", [E.CANCELLING, E.SUCCEEDED, E.FAILED, E.SKIPPED])
def test_cancel_of_a_cancelling_or_finished_execution_changes_nothing(state: E) -> None:
    v = view("a=running", state=state)
    assert not cancel(v, NOW).changes(v)


def test_cancel_of_a_failing_execution_clears_the_blame() -> None:
    v = view("a=dead b=running", failed_step="a")
    t = cancel(v, NOW)
    assert (t.state, t.failed_step, t.cancel) == (E.CANCELLING, None, ("b",))


# --------------------------------------------------------------------------- a whole run


def test_a_diamond_runs_to_success_under_max_parallel_one() -> None:
    v = view(DIAMOND, state=E.QUEUED, max_parallel=1)
    v = apply(v, start(v, NOW))
    order = []
    while not v.state.finished:
        (sid,) = [s.id for s in v.steps if s.state is S.QUEUED]
        order.append(sid)
        v = replace(v, steps=tuple(
            StepView(s.id, S.RUNNING if s.id == sid else s.state, s.depends_on)
            for s in v.steps
        ))  # a worker claimed it
        assert sum(s.state is S.RUNNING for s in v.steps) <= 1
        v = apply(v, step_ended(v, sid, S.SUCCEEDED, NOW))
    assert order == ["a", "b", "c", "d"]
    assert v.state is E.SUCCEEDED


# --------------------------------------------------------------------------- concurrency


def slots(text: str) -> list[ExecutionSlot]:
    """``id:state@created_at`` items."""
    out = []
    for item in text.split():
        head, _, created = item.partition("@")
        eid, _, state = head.partition(":")
        out.append(ExecutionSlot(eid, E(state), int(created)))
    return out


QUEUE1 = ConcurrencySpec(1, "queue")
QUEUE2 = ConcurrencySpec(2, "queue")
SKIP1 = ConcurrencySpec(1, "skip")
SKIP2 = ConcurrencySpec(2, "skip")
RR1 = ConcurrencySpec(1, "round_robin")
CIP1 = ConcurrencySpec(1, "cancel_in_progress")
CIP2 = ConcurrencySpec(2, "cancel_in_progress")
LATEST1 = ConcurrencySpec(1, "latest")
LATEST2 = ConcurrencySpec(2, "latest")


@pytest.mark.parametrize(
    ("concurrency", "others", "expected"),
    [
        (None, "x:running@1 y:running@2", Admission(E.RUNNING)),
        (QUEUE1, "", Admission(E.RUNNING)),
        (QUEUE1, "x:running@1", Admission(E.QUEUED)),
        (QUEUE1, "x:cancelling@1", Admission(E.QUEUED)),
        (QUEUE1, "x:succeeded@1 y:failed@2 z:skipped@3", Admission(E.RUNNING)),
        (QUEUE2, "x:running@1", Admission(E.RUNNING)),
        (QUEUE2, "x:running@1 y:queued@2", Admission(E.QUEUED)),  # older ones go first
        (SKIP1, "", Admission(E.RUNNING)),
        (SKIP1, "x:running@1", Admission(E.SKIPPED, R.CONCURRENCY_LIMIT)),
        (SKIP1, "x:cancelling@1", Admission(E.SKIPPED, R.CONCURRENCY_LIMIT)),
        (SKIP1, "x:queued@1", Admission(E.SKIPPED, R.CONCURRENCY_LIMIT)),
        (SKIP1, "x:skipped@1 y:timed_out@2", Admission(E.RUNNING)),
        (SKIP2, "x:running@1", Admission(E.RUNNING)),
        (SKIP2, "x:running@1 y:queued@2", Admission(E.SKIPPED, R.CONCURRENCY_LIMIT)),
        # SPEC §13
        (RR1, "x:running@1", Admission(E.QUEUED)),
        (RR1, "", Admission(E.RUNNING)),
        (CIP1, "", Admission(E.RUNNING)),
        (CIP1, "x:running@1", Admission(E.RUNNING, supersede=("x",))),
        (CIP1, "x:cancelling@1", Admission(E.RUNNING)),  # already on its way out
        (CIP1, "y:queued@2 x:running@1", Admission(E.RUNNING, supersede=("x", "y"))),
        (CIP2, "y:running@2 x:running@1", Admission(E.RUNNING, supersede=("x",))),
        (CIP2, "x:running@1", Admission(E.RUNNING)),
        (LATEST1, "", Admission(E.RUNNING)),
        (LATEST1, "x:running@1", Admission(E.QUEUED)),
        (LATEST1, "x:running@1 y:queued@2", Admission(E.QUEUED, supersede=("y",))),
        (LATEST2, "x:running@1", Admission(E.RUNNING)),
    ],
)
def test_admit_table(concurrency: ConcurrencySpec | None, others: str, expected: Admission) -> None:
    assert admit(concurrency, slots(others)) == expected


@pytest.mark.parametrize(
    ("concurrency", "executions", "started"),
    [
        (QUEUE1, "a:succeeded@1 b:queued@3 c:queued@2", ("c",)),  # oldest first
        (QUEUE1, "a:running@1 b:queued@2", ()),
        (QUEUE1, "a:cancelling@1 b:queued@2", ()),  # cancelling still holds the slot
        (QUEUE2, "a:running@1 b:queued@5 c:queued@4 d:queued@4", ("c",)),
        (QUEUE2, "b:queued@5 d:queued@4 c:queued@4", ("c", "d")),  # ties: by id
        (QUEUE1, "a:failed@1", ()),
        (None, "a:queued@2 b:queued@1", ("b", "a")),
        (LATEST1, "a:succeeded@1 b:queued@2", ("b",)),
        (RR1, "a:succeeded@1 b:queued@2", ("b",)),
    ],
)
def test_promote_table(
    concurrency: ConcurrencySpec | None, executions: str, started: tuple[str, ...]
) -> None:
    assert promote(concurrency, slots(executions)) == started


def test_a_superseding_cancel_ends_the_running_steps_and_the_execution_at_once() -> None:
    """SPEC §13: a superseded execution's running steps end as a superseded job does
    (attempt and job ``cancelled``, ``superseded``), not after their workers see a cancel
    request; a user's cancel still asks them."""
    view = ExecutionView(
        state=E.RUNNING, steps=(StepView("a", S.RUNNING), StepView("b", S.PENDING, ("a",)))
    )
    t = cancel(view, 5, R.SUPERSEDED)
    assert (t.state, t.reason, t.finished, t.stop, t.cancel) == (
        E.CANCELLED, R.SUPERSEDED, True, ("a",), (),
    )  # fmt: skip
    assert (t.not_run, t.not_run_reason) == (("b",), R.SUPERSEDED)
    assert [s.state for s in apply(view, t).steps] == [S.CANCELLED, S.NOT_RUN]
    ops = plan.ops(t, plan.index_of(view.steps), {"a": S.RUNNING, "b": S.PENDING}.__getitem__)
    ends = [op for op in ops if isinstance(op, plan.EndJob)]
    assert ends[0] == plan.EndJob(
        "a", 0, JobState.RUNNING, JobState.CANCELLED, "superseded", Outcome.CANCELLED
    )
    asked = cancel(view, 5)
    assert (asked.state, asked.cancel, asked.stop) == (E.CANCELLING, ("a",), ())


# --------------------------------------------------------------------------- random runs

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def random_runs(draw: st.DrawFn) -> tuple[ExecutionView, list[tuple[str, int]]]:
    n = draw(st.integers(1, 7))
    deps = [
        tuple(f"s{j}" for j in sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))))
        if i else ()
        for i in range(n)
    ]
    v = ExecutionView(
        state=E.QUEUED,
        steps=tuple(StepView(f"s{i}", S.PENDING, deps[i]) for i in range(n)),
        max_parallel=draw(st.integers(0, 3)),
        timeout_ms=draw(st.sampled_from([None, 50])),
    )
    events = draw(st.lists(
        st.tuples(st.sampled_from(["claim", "ok", "dead", "retry", "cancel", "supersede",
                                   "tick"]),
                  st.integers(0, n - 1)),
        max_size=60,
    ))
    return v, events


@settings(max_examples=300, deadline=None)
@given(random_runs())
def test_random_runs_keep_the_invariants(run: tuple[ExecutionView, list[tuple[str, int]]]) -> None:
    v, events = run
    now = NOW
    v = apply(v, start(v, now))
    for kind, i in events:
        before = v
        sid = v.steps[i].id
        state = v.steps[i].state
        if kind == "claim" and state is S.QUEUED and not v.state.finished:
            v = replace(v, steps=tuple(
                StepView(s.id, S.RUNNING, s.depends_on) if s.id == sid else s for s in v.steps
            ))
        elif kind in ("ok", "dead", "retry") and state is S.RUNNING:
            ended = {"ok": S.SUCCEEDED, "dead": S.DEAD, "retry": S.QUEUED}[kind]
            v = apply(v, step_ended(v, sid, ended, now))
        elif kind == "cancel":
            v = apply(v, cancel(v, now))
        elif kind == "supersede":
            v = apply(v, cancel(v, now, R.SUPERSEDED))
        elif kind == "tick":
            now += 20
            v = apply(v, advance(v, now))
        states = {s.id: s.state for s in v.steps}
        # a step is queued or running only once its dependencies all succeeded
        for s in v.steps:
            if s.state in (S.QUEUED, S.RUNNING):
                assert all(states[d] is S.SUCCEEDED for d in s.depends_on)
        if v.max_parallel:
            assert sum(st_ in (S.QUEUED, S.RUNNING) for st_ in states.values()) <= max(
                v.max_parallel, sum(s.state in (S.QUEUED, S.RUNNING) for s in before.steps)
            )
            assert sum(st_ is S.RUNNING for st_ in states.values()) <= v.max_parallel
        # a finished execution has no step left to start, and changes no more
        if v.state.finished:
            assert all(s.state.finished for s in v.steps)
            assert not advance(v, now + 10**9).changes(v)
        if before.state.finished:
            assert v == before
        if v.state is E.SUCCEEDED:
            assert all(st_ is S.SUCCEEDED for st_ in states.values())
        if v.state is E.FAILED:
            assert v.failed_step is not None and states[v.failed_step] is S.DEAD
            assert S.RUNNING not in states.values()
        if v.state is not E.RUNNING:
            # no releases outside running
            assert not advance(v, now).release

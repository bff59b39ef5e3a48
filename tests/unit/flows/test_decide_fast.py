"""The fast step end (queue_core.rules.flows.decide_fast) decides what decide.step_ended does."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from queue_core.records.flows import ExecutionState, StepState
from queue_core.rules.flows import decide
from queue_core.rules.flows.decide import ExecutionView, StepView
from queue_core.rules.flows.decide_fast import (
    ExecutionHead,
    advance_idle,
    step_ended_fast,
    step_index,
)

S = StepState
E = ExecutionState


def random_dag(rng: random.Random) -> tuple[StepView, ...]:
    n = rng.randint(1, 12)
    steps = []
    for i in range(n):
        earlier = [f"s{j}" for j in range(i)]
        k = rng.randint(0, min(3, i))
        deps = tuple(rng.sample(earlier, k))
        if deps and rng.random() < 0.1:
            deps = (*deps, deps[0])  # a repeated dependency counts once
        steps.append(StepView(f"s{i}", S.PENDING, deps))
    order = list(range(n))
    if rng.random() < 0.5:  # definition order need not be topological
        rng.shuffle(order)
    return tuple(steps[i] for i in order)


def fast(view: ExecutionView, step: str, state: S, now: int) -> decide.Transition | None:
    index = step_index([(s.id, s.depends_on) for s in view.steps])
    states = {s.id: s.state for s in view.steps}
    succeeded = {sid for sid, st in states.items() if st is S.SUCCEEDED}
    dependents = {
        index.ids[d]: (
            states[index.ids[d]],
            len(set(index.depends_on[d]) - succeeded),
        )
        for d in index.dependents[index.pos[step]]
    }
    head = ExecutionHead(
        state=view.state,
        max_parallel=view.max_parallel,
        deadline_at=view.deadline_at,
        reason=view.reason,
        failed_step=view.failed_step,
    )
    counts = Counter(states.values())
    return step_ended_fast(head, index, counts, step, states[step], state, dependents, now)


ENDS = (
    S.SUCCEEDED,
    S.SUCCEEDED,
    S.SUCCEEDED,
    S.QUEUED,
    S.DEAD,
    S.CANCELLED,
    S.SKIPPED,
    S.TIMED_OUT,
)


def run_one(rng: random.Random) -> tuple[int, int]:
    """One random execution driven by the full decisions; at each step end the fast path
    must agree whenever it decides. Returns (ends judged, ends decided fast)."""
    steps = random_dag(rng)
    mp = rng.choice((0, 0, 0, 1, 2))
    timeout = rng.choice((None, None, 50))
    view = ExecutionView(state=E.QUEUED, steps=steps, max_parallel=mp, timeout_ms=timeout)
    now = 0
    view = decide.apply(view, decide.start(view, now))
    judged = decided = 0
    while not view.state.finished:
        now += rng.randint(0, 8)
        live = [s for s in view.steps if s.state in (S.QUEUED, S.RUNNING)]
        if not live or rng.random() < 0.03:
            if rng.random() < 0.5:
                view = decide.apply(view, decide.cancel(view, now))
            else:
                view = decide.apply(view, decide.advance(view, now))
            if not live and not view.state.finished:
                view = decide.apply(view, decide.advance(view, now + 10_000))
            continue
        s = rng.choice(live)
        if s.state is S.QUEUED and rng.random() < 0.6:  # claimed
            view = decide.apply(
                view,
                decide.Transition(
                    state=view.state,
                    reason=view.reason,
                    failed_step=view.failed_step,
                    deadline_at=view.deadline_at,
                    ended=((s.id, S.RUNNING),),
                ),
            )
            continue
        end = rng.choice(ENDS)
        old = decide.step_ended(view, s.id, end, now)
        new = fast(view, s.id, end, now)
        judged += 1
        if new is not None:
            decided += 1
            assert new == old, (view, s.id, end, now)
        view = decide.apply(view, old)
        if idle(view, now + rng.randint(0, 8)):
            IDLE[0] += 1
    return judged, decided


IDLE = [0]


def idle(view: ExecutionView, now: int) -> bool:
    """advance_idle on the counts; when it says idle, decide.advance changes nothing."""
    head = ExecutionHead(
        state=view.state,
        max_parallel=view.max_parallel,
        deadline_at=view.deadline_at,
        reason=view.reason,
        failed_step=view.failed_step,
    )
    counts = Counter(s.state for s in view.steps)
    got = advance_idle(head, counts, len(view.steps), now)
    if got:
        assert not decide.advance(view, now).changes(view), view
    return got


def test_fast_step_end_agrees_with_the_full_decision_over_random_dags() -> None:
    rng = random.Random(20261130)
    judged = decided = 0
    for _ in range(1500):
        j, d = run_one(rng)
        judged += j
        decided += d
    # the fast path is taken for most ends (it is not a path that always says None)
    assert decided > 500 and decided > judged // 6
    assert IDLE[0] > 500  # and advance_idle answers for most of the states in between


def test_fast_path_releases_the_join_only_on_its_last_dependency() -> None:
    steps = (
        StepView("a", S.SUCCEEDED),
        StepView("b", S.RUNNING),
        StepView("c", S.RUNNING),
        StepView("j", S.PENDING, ("a", "b", "c")),
    )
    view = ExecutionView(state=E.RUNNING, steps=steps)
    first = fast(view, "b", S.SUCCEEDED, 1)
    assert first is not None and first.release == ()
    view = decide.apply(view, first)
    last = fast(view, "c", S.SUCCEEDED, 2)
    assert last is not None and last.release == ("j",)
    assert last == decide.step_ended(view, "c", S.SUCCEEDED, 2)


@pytest.mark.parametrize(
    ("kw", "end"),
    [
        ({"max_parallel": 1}, S.SUCCEEDED),
        ({"deadline_at": 5}, S.SUCCEEDED),
        ({"failed_step": "a"}, S.SUCCEEDED),
        ({}, S.DEAD),
        ({}, S.TIMED_OUT),
        ({"state": E.CANCELLING}, S.SUCCEEDED),
    ],
)
def test_other_cases_are_left_to_the_full_decision(kw: dict[str, Any], end: S) -> None:
    steps = (StepView("a", S.RUNNING), StepView("b", S.PENDING, ("a",)))
    view = replace(ExecutionView(state=E.RUNNING, steps=steps), **kw)
    assert fast(view, "a", end, 5) is None


def test_step_index_counts_distinct_dependencies_and_orders_dependents() -> None:
    index = step_index([("j", ("a", "b", "a")), ("a", ()), ("b", ("a",))])
    assert index.unmet == (2, 0, 1)
    assert index.dependents[index.pos["a"]] == (0, 2)
    with pytest.raises(KeyError):
        step_index([("a", ("nope",))])

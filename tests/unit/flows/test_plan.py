"""The plan of a flow decision (queue_core.rules.flows.plan): its operations, applied by a
reference interpreter, give what decide.apply gives; folding events gives the same plan
whatever order storage kept them in."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome
from queue_core.rules.flows import decide, plan
from queue_core.rules.flows import fold as folding
from queue_core.rules.flows.decide import Admission, ExecutionView, StepView
from queue_core.rules.flows.decide_fast import ExecutionHead
from tests.unit.flows.test_decide_fast import random_dag

S = StepState
E = ExecutionState


@dataclass
class Store:
    """A reference interpreter of plan operations over plain dicts (what a backend does)."""

    view: ExecutionView
    jobs: dict[int, JobState] = field(default_factory=dict)
    counts: Counter[StepState] = field(default_factory=Counter)
    unmet: dict[int, int] = field(default_factory=dict)
    cancel_requested: set[int] = field(default_factory=set)
    ended_jobs: list[tuple[int, JobState, str, Outcome | None]] = field(default_factory=list)
    started: bool = False
    finished: bool = False

    def __post_init__(self) -> None:
        self.counts = Counter(s.state for s in self.view.steps)
        index = plan.index_of(self.view.steps)
        succeeded = {s.id for s in self.view.steps if s.state is S.SUCCEEDED}
        self.unmet = {i: len(set(index.depends_on[i]) - succeeded) for i in range(len(index.ids))}

    def apply(self, ops: list[plan.Op]) -> None:
        steps = list(self.view.steps)
        for op in ops:
            if isinstance(op, plan.SetStep):
                assert steps[op.idx].state is op.was, (op, steps[op.idx])
                steps[op.idx] = StepView(op.step, op.state, steps[op.idx].depends_on)
                self.counts[op.was] -= 1
                self.counts[op.state] += 1
                for d in op.dependents:
                    self.unmet[d] -= 1
            elif isinstance(op, plan.SetExecution):
                self.view = replace(
                    self.view,
                    state=op.state,
                    reason=op.reason,
                    failed_step=op.failed_step,
                    deadline_at=op.deadline_at,
                )
            elif isinstance(op, plan.Started):
                self.started = True
            elif isinstance(op, plan.Finished):
                self.finished = True
            elif isinstance(op, plan.EndJob):
                if self.jobs.get(op.idx) is op.when:
                    self.jobs[op.idx] = op.state
                    self.ended_jobs.append((op.idx, op.state, op.reason, op.outcome))
            elif isinstance(op, plan.RequestCancel):
                if self.jobs.get(op.idx) is JobState.RUNNING:
                    self.cancel_requested.add(op.idx)
            elif isinstance(op, plan.Release):
                assert op.idx not in self.jobs, "released twice"
                self.jobs[op.idx] = JobState.QUEUED
        self.view = replace(self.view, steps=tuple(steps))


def _random_view(rng: random.Random) -> ExecutionView:
    steps = random_dag(rng)
    view = ExecutionView(
        state=E.QUEUED,
        steps=steps,
        max_parallel=rng.choice([0, 0, 1, 2, 3]),
        timeout_ms=rng.choice([None, 1_000]),
    )
    return view


@pytest.mark.parametrize("seed", range(300))
def test_every_decision_applied_through_its_plan_is_what_decide_apply_says(seed: int) -> None:
    rng = random.Random(seed)
    view = _random_view(rng)
    index = plan.index_of(view.steps)
    store = Store(view)
    store.apply(plan.start_ops(view, index, Admission(E.RUNNING), 0))
    assert store.view == decide.apply(view, decide.start(view, 0))
    now = 0
    for _ in range(60):
        cur = store.view
        if cur.state.finished:
            break
        now += rng.choice([1, 10, 100, 400])
        live = [i for i, s in enumerate(cur.steps) if s.state in (S.QUEUED, S.RUNNING)]
        kind = rng.random()
        if kind < 0.05:
            t = decide.cancel(cur, now)
        elif not live or kind < 0.1:
            t = decide.advance(cur, now)
        else:
            i = rng.choice(live)
            sid = cur.steps[i].id
            if cur.steps[i].state is S.QUEUED:  # the worker claims it first
                store.jobs[i] = JobState.RUNNING
                store.apply(plan.claim_ops(index, sid))
                cur = store.view
            end = rng.choice([S.SUCCEEDED] * 6 + [S.QUEUED, S.DEAD, S.CANCELLED])
            store.jobs[i] = JobState(end.value)
            t = decide.step_ended(cur, sid, end, now)
        expected = decide.apply(cur, t)
        store.apply(plan.ops(t, index, {s.id: s.state for s in cur.steps}.__getitem__))
        assert store.view == expected
        assert sum(store.counts.values()) == len(index.ids)
        assert all(store.counts[s] == sum(1 for v in expected.steps if v.state is s) for s in S)
        for j, st in enumerate(expected.steps):
            if st.state is S.PENDING:  # the unmet counter matches the dependencies' states
                done = {v.id for v in expected.steps if v.state is S.SUCCEEDED}
                assert store.unmet[j] == len(set(index.depends_on[j]) - done)


def test_a_timed_out_flow_ends_its_running_job_and_cancels_its_queued_one() -> None:
    view = ExecutionView(
        state=E.RUNNING,
        steps=(StepView("a", S.RUNNING), StepView("b", S.QUEUED), StepView("c", S.PENDING, ("a",))),
        deadline_at=100,
    )
    index = plan.index_of(view.steps)
    t = decide.advance(view, 100)
    got = plan.ops(t, index, {s.id: s.state for s in view.steps}.__getitem__)
    assert got == [
        plan.SetExecution(E.TIMED_OUT, ExecutionReason.FLOW_TIMEOUT, None, 100),
        plan.Finished(),
        plan.SetStep("a", 0, S.TIMED_OUT, "flow_timeout", S.RUNNING),
        plan.EndJob(
            "a", 0, JobState.RUNNING, JobState.TIMED_OUT, "flow_timeout", Outcome.TIMED_OUT
        ),
        plan.SetStep("b", 1, S.NOT_RUN, "flow_timeout", S.QUEUED),
        plan.EndJob("b", 1, JobState.QUEUED, JobState.CANCELLED, "not_run", None),
        plan.SetStep("c", 2, S.NOT_RUN, "flow_timeout", S.PENDING),
        plan.EndJob("c", 2, JobState.QUEUED, JobState.CANCELLED, "not_run", None),
    ]


def test_a_skipped_execution_is_stored_finished_with_every_step_not_run() -> None:
    view = ExecutionView(state=E.QUEUED, steps=(StepView("a", S.PENDING), StepView("b", S.PENDING)))
    admission = Admission(E.SKIPPED, ExecutionReason.CONCURRENCY_LIMIT)
    got = plan.start_ops(view, plan.index_of(view.steps), admission, 5)
    assert got == [
        plan.SetStep("a", 0, S.NOT_RUN, "concurrency_limit", S.PENDING),
        plan.SetStep("b", 1, S.NOT_RUN, "concurrency_limit", S.PENDING),
        plan.SetExecution(E.SKIPPED, ExecutionReason.CONCURRENCY_LIMIT, None, None),
        plan.Finished(),
    ]
    queued = plan.start_ops(view, plan.index_of(view.steps), Admission(E.QUEUED), 5)
    assert queued == [plan.SetExecution(E.QUEUED, None, None, None)]


@pytest.mark.parametrize("seed", range(200))
def test_step_end_plans_the_same_writes_by_the_fast_and_the_full_path(seed: int) -> None:
    rng = random.Random(seed)
    view = replace(_random_view(rng), max_parallel=0, timeout_ms=None)
    index = plan.index_of(view.steps)
    store = Store(view)
    store.apply(plan.start_ops(view, index, Admission(E.RUNNING), 0))
    for now in range(1, 40):
        cur = store.view
        live = [i for i, s in enumerate(cur.steps) if s.state is S.QUEUED]
        if cur.state.finished or not live:
            break
        i = rng.choice(live)
        sid = cur.steps[i].id
        end = rng.choice([S.SUCCEEDED] * 8 + [S.QUEUED])
        head = ExecutionHead(
            state=cur.state, deadline_at=cur.deadline_at, failed_step=cur.failed_step
        )
        states = {s.id: s.state for s in cur.steps}

        def dependents(cur: ExecutionView = cur, i: int = i) -> dict[str, tuple[S, int]]:
            return {index.ids[d]: (cur.steps[d].state, store.unmet[d]) for d in index.dependents[i]}

        full_calls: list[int] = []

        def full(cur: ExecutionView = cur, calls: list[int] = full_calls) -> ExecutionView:
            calls.append(1)
            return cur

        t, got = plan.step_end(
            head, index, Counter(states.values()), sid, S.QUEUED, end, dependents, full, now
        )
        assert not full_calls, "the common step end is decided without reading every step"
        want_t = decide.step_ended(cur, sid, end, now)
        assert decide.apply(cur, t) == decide.apply(cur, want_t)
        assert got == plan.ops(want_t, index, states.__getitem__, {sid: None})
        store.apply(got)


@pytest.mark.parametrize("seed", range(100))
def test_fold_gives_one_result_whatever_order_the_events_were_kept_in(seed: int) -> None:
    rng = random.Random(seed)
    steps = tuple(StepView(f"s{i}", S.PENDING) for i in range(rng.randint(2, 6)))
    view = decide.apply(
        ExecutionView(state=E.QUEUED, steps=steps),
        decide.start(ExecutionView(state=E.QUEUED, steps=steps), 0),
    )
    index = plan.index_of(view.steps)
    events = []
    for i in range(len(steps)):
        attempts = rng.randint(1, 3)
        for n in range(1, attempts + 1):
            events.append(folding.StepEvent(i, S.RUNNING, n))
            last = n == attempts
            end = rng.choice([S.SUCCEEDED, S.DEAD]) if last else S.QUEUED
            if last and rng.random() < 0.3:
                break  # still running: a claim with no end yet
            events.append(folding.StepEvent(i, end, n, "retry" if end is S.QUEUED else None))
    reference = folding.fold(view, index, events, 10)
    for _ in range(5):
        shuffled = events[:]
        rng.shuffle(shuffled)
        again = folding.fold(view, index, shuffled, 10)
        assert again.view == reference.view
        assert again.finished == reference.finished
    for i in range(len(steps)):  # a step last claimed is running, whatever its siblings did
        mine = [e for e in events if e.idx == i]
        latest = max(mine, key=lambda e: (e.attempt, e.state is not S.RUNNING))
        if latest.state is S.RUNNING:
            assert reference.view.steps[i].state is S.RUNNING
        else:
            assert reference.view.steps[i].state in (latest.state, S.NOT_RUN)


def test_fold_with_no_event_judges_the_deadline() -> None:
    view = ExecutionView(state=E.RUNNING, steps=(StepView("a", S.RUNNING),), deadline_at=50)
    index = plan.index_of(view.steps)
    assert folding.fold(view, index, [], 49).ops == []
    late = folding.fold(view, index, [], 50)
    assert late.finished and late.view.state is E.TIMED_OUT
    assert (
        plan.EndJob("a", 0, JobState.RUNNING, JobState.TIMED_OUT, "flow_timeout", Outcome.TIMED_OUT)
        in late.ops
    )


def _pending_events(
    rng: random.Random, cur: ExecutionView, attempts: Counter[int]
) -> list[folding.StepEvent]:
    """A batch of step events as storage records them before an advance: claims of queued
    steps, ends of running ones (a retry sometimes claimed again), in any order."""
    events: list[folding.StepEvent] = []
    for i, s in enumerate(cur.steps):
        if s.state is S.QUEUED and rng.random() < 0.5:
            attempts[i] += 1
            events.append(folding.StepEvent(i, S.RUNNING, attempts[i]))
        elif s.state is S.RUNNING and rng.random() < 0.6:
            end = rng.choice([S.SUCCEEDED] * 6 + [S.QUEUED] * 2 + [S.DEAD, S.CANCELLED])
            events.append(folding.StepEvent(i, end, attempts[i], end.value))
            if end is S.QUEUED and rng.random() < 0.5:
                attempts[i] += 1
                events.append(folding.StepEvent(i, S.RUNNING, attempts[i]))
    rng.shuffle(events)
    return events


def test_fold_fast_plans_what_fold_plans_whenever_it_decides() -> None:
    decided = batches = 0
    for seed in range(300):
        rng = random.Random(seed)
        view = replace(_random_view(rng), max_parallel=rng.choice([0, 0, 0, 2]))
        index = plan.index_of(view.steps)
        store = Store(view)
        store.apply(plan.start_ops(view, index, Admission(E.RUNNING), 0))
        attempts: Counter[int] = Counter()
        for now in range(1, 60):
            cur = store.view
            if cur.state.finished:
                break
            events = _pending_events(rng, cur, attempts)
            want = folding.fold(cur, index, events, now)
            head = ExecutionHead(
                state=cur.state,
                max_parallel=cur.max_parallel,
                deadline_at=cur.deadline_at,
                reason=cur.reason,
                failed_step=cur.failed_step,
            )
            reads: list[tuple[list[int], list[int]]] = []

            def read(
                steps: Sequence[int],
                deps: Sequence[int],
                cur: ExecutionView = cur,
                reads: list[tuple[list[int], list[int]]] = reads,
                unmet: dict[int, int] = store.unmet,
            ) -> Any:
                reads.append((list(steps), list(deps)))
                wanted = [*steps, *deps]
                return {i: cur.steps[i].state for i in wanted}, {d: unmet[d] for d in deps}

            counts = Counter(s.state for s in cur.steps)
            got = folding.fold_fast(head, index, counts, events, read, now)
            batches += 1
            if got is not None:
                decided += 1
                assert got.ops == want.ops
                after = want.view
                assert (got.head.state, got.head.reason, got.head.failed_step) == (
                    after.state,
                    after.reason,
                    after.failed_step,
                )
                assert got.head.deadline_at == after.deadline_at
                assert got.finished == want.finished
                assert len(reads) <= 1 and all(len(s) <= len(events) for s, _ in reads)
            store.apply(want.ops)
    assert decided > batches // 3, (decided, batches)  # the common case is decided fast


def test_fold_fast_leaves_a_failing_execution_to_the_full_view() -> None:
    view = ExecutionView(
        state=E.RUNNING,
        steps=(
            StepView("a", S.RUNNING),
            StepView("b", S.RUNNING),
            StepView("c", S.PENDING, ("a",)),
        ),
    )
    index = plan.index_of(view.steps)
    head = ExecutionHead(state=E.RUNNING)
    counts = Counter(s.state for s in view.steps)

    def read(steps: Sequence[int], deps: Sequence[int]) -> Any:
        return {i: view.steps[i].state for i in [*steps, *deps]}, {d: 1 for d in deps}

    dead = [folding.StepEvent(1, S.DEAD, 1, "retries_exhausted")]
    assert folding.fold_fast(head, index, counts, dead, read, 5) is None
    ok = [folding.StepEvent(0, S.SUCCEEDED, 1, None)]
    got = folding.fold_fast(head, index, counts, ok, read, 5)
    assert got is not None and got.ops == folding.fold(view, index, ok, 5).ops
    assert plan.Release("c", 2, None) in got.ops


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_fold_takes_a_queued_jobs_end_over_the_retry_of_the_same_attempt(
    order: tuple[int, int],
) -> None:
    # attempt 1 ended in a retry (queued), then the queued job was cancelled: both events
    # carry attempt 1, and the cancel is the later one whatever order they were kept in
    view = ExecutionView(
        state=E.RUNNING, steps=(StepView("a", S.RUNNING), StepView("b", S.PENDING))
    )
    index = plan.index_of(view.steps)
    kept = [folding.StepEvent(0, S.QUEUED, 1), folding.StepEvent(0, S.CANCELLED, 1, "cancelled")]
    folded = folding.fold(view, index, [kept[i] for i in order], 10)
    assert folded.view.steps[0].state is S.CANCELLED
    assert folded.view.state is E.FAILED and folded.finished


def test_fold_of_claims_only_still_judges_the_deadline() -> None:
    view = ExecutionView(
        state=E.RUNNING, steps=(StepView("a", S.QUEUED), StepView("b", S.QUEUED)), deadline_at=50
    )
    index = plan.index_of(view.steps)
    late = folding.fold(view, index, [folding.StepEvent(0, S.RUNNING, 1)], 50)
    assert late.finished and late.view.state is E.TIMED_OUT
    assert [s.state for s in late.view.steps] == [S.TIMED_OUT, S.NOT_RUN]
    early = folding.fold(view, index, [folding.StepEvent(0, S.RUNNING, 1)], 49)
    assert early.view.state is E.RUNNING and early.view.steps[0].state is S.RUNNING

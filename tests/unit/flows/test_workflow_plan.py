"""The plans of workflows and resumes (queue_core.rules.flows.workflow and the workflow
operations of queue_core.rules.flows.plan): a reference interpreter gets what the pure
decisions say -- a suspension's waits, the wake on the last awaited child, an event
delivered once, a resume that re-runs exactly the steps it should."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace

import pytest

from queue_core.records.errors import ConfigError
from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, NewJob
from queue_core.records.workflows import (
    PARKED_AT,
    EventWait,
    MemoPut,
    MemoRecord,
    NewChild,
    StoredEvent,
    Suspension,
)
from queue_core.rules.flows import decide, plan, workflow
from queue_core.rules.flows.decide import Admission, ExecutionView, StepView
from queue_core.rules.flows.decide_fast import ExecutionHead
from tests.unit.flows.test_decide_fast import random_dag

S = StepState
E = ExecutionState
NOW = 1_000


@dataclass
class Job:
    state: JobState
    ready_at: int
    attempts: int = 0
    budget: int = 1


@dataclass
class WStore:
    """A reference interpreter of plan operations (the workflow ones included)."""

    view: ExecutionView
    jobs: dict[int, Job] = field(default_factory=dict)
    memos: dict[str, MemoRecord] = field(default_factory=dict)
    waits: dict[str, EventWait] = field(default_factory=dict)
    unmet: dict[int, int] = field(default_factory=dict)
    reopened: bool = False
    finished: bool = False
    now: int = NOW

    def apply(self, ops: list[plan.Op]) -> None:
        for op in ops:
            self._one(op)

    def _one(self, op: plan.Op) -> None:  # noqa: C901, PLR0912 - one branch per operation kind
        v = self.view
        if isinstance(op, plan.SetStep):
            assert v.steps[op.idx].state is op.was, (op, v.steps[op.idx])
            self._step(op.idx, op.state)
        elif isinstance(op, plan.SetExecution):
            self.view = replace(
                v,
                state=op.state,
                reason=op.reason,
                failed_step=op.failed_step,
                deadline_at=op.deadline_at,
            )
        elif isinstance(op, plan.Finished):
            self.finished, self.waits = True, {}
        elif isinstance(op, plan.Reopened):
            self.finished, self.reopened = False, True
        elif isinstance(op, plan.Release):
            job = self.jobs.get(op.idx)
            if job is None:
                self.jobs[op.idx] = Job(JobState.QUEUED, self.now)
            elif job.state.finished:  # a re-run: a fresh budget on top of the attempts
                job.state, job.ready_at = JobState.QUEUED, self.now
                job.budget = job.attempts + 1
        elif isinstance(op, plan.EndJob):
            job = self.jobs.get(op.idx)
            if job is not None and job.state is op.when:
                job.state = op.state
        elif isinstance(op, plan.AddStep):
            assert op.idx == len(v.steps)
            self.view = replace(v, steps=(*v.steps, StepView(op.step, op.state)))
            if op.job is not None:
                self.jobs[op.idx] = Job(JobState.QUEUED, self.now)
        elif isinstance(op, (plan.SetReady, plan.Wake)):
            job = self.jobs.get(op.idx)
            if job is not None and job.state is JobState.QUEUED:
                job.ready_at = self.now if isinstance(op, plan.Wake) else op.at
        elif isinstance(op, plan.SetAwaiting):
            assert op.steps == tuple(v.steps[i].id for i in op.idxs)
            self.view = replace(v, awaiting=op.steps)
        elif isinstance(op, plan.PutMemo):
            old = self.memos.get(op.key)
            seq = old.seq if old else 1 + max((m.seq for m in self.memos.values()), default=0)
            self.memos[op.key] = MemoRecord(key=op.key, value=op.value, seq=seq, at=self.now)
        elif isinstance(op, plan.DropMemos):
            for key in op.keys:
                del self.memos[key]
        elif isinstance(op, plan.AddWaiter):
            self.waits[op.wait.memo_key] = op.wait
        elif isinstance(op, plan.DropWaiter):
            del self.waits[op.memo_key]
        elif isinstance(op, plan.SetUnmet):
            self.unmet[op.idx] = op.unmet
        elif not isinstance(op, (plan.Started, plan.RequestCancel)):
            raise AssertionError(op)

    def _step(self, idx: int, state: StepState) -> None:
        steps = list(self.view.steps)
        steps[idx] = StepView(steps[idx].id, state, steps[idx].depends_on)
        self.view = replace(self.view, steps=tuple(steps))

    def end_job(self, idx: int, state: StepState) -> None:
        job = self.jobs[idx]
        job.attempts += 1
        job.state = JobState.QUEUED if state is S.QUEUED else JobState(state.value)


def _running_workflow() -> WStore:
    view = ExecutionView(state=E.QUEUED, steps=(StepView("main", S.PENDING),), kind="workflow")
    store = WStore(view)
    index = plan.index_of(view.steps)
    store.apply(plan.start_ops(view, index, Admission(E.RUNNING), NOW))
    assert store.view.state is E.RUNNING and store.jobs[0].state is JobState.QUEUED
    _claim(store, 0)
    return store


def _claim(store: WStore, idx: int) -> None:
    index = plan.index_of(store.view.steps)
    head = ExecutionHead(state=store.view.state, kind="workflow")
    store.jobs[idx].state = JobState.RUNNING
    store.apply(plan.claim_ops(index, store.view.steps[idx].id, head))


def _child(idx: int, n: int) -> NewChild:
    job = NewJob(id=f"e.{idx}", task_name="t", queue="default", payload=b"")
    return NewChild(idx, f"t#{n}", job)


def _suspend(store: WStore, s: Suspension, event: StoredEvent | None = None) -> None:
    store.end_job(0, S.QUEUED)
    index = plan.index_of(store.view.steps)
    store.apply(workflow.suspend_ops(store.view, index, s, store.now, event))


def _child_end(store: WStore, idx: int, state: StepState) -> decide.Transition:
    before = store.view
    store.end_job(idx, state)
    sid = before.steps[idx].id
    t = decide.step_ended(before, sid, state, store.now)
    index = plan.index_of(before.steps)
    store.apply(plan.ops(t, index, {s.id: s.state for s in before.steps}.__getitem__))
    assert store.view == decide.apply(before, t)
    return t


def test_a_sleep_stores_its_memo_and_readies_the_function_at_the_wake_time() -> None:
    store = _running_workflow()
    wake = NOW + 60_000
    _suspend(store, Suspension(ready_at=wake, memos=(MemoPut("t:0", str(wake).encode()),)))
    assert store.view.state is E.WAITING
    assert store.view.steps[0].state is S.QUEUED
    assert (store.jobs[0].state, store.jobs[0].ready_at) == (JobState.QUEUED, wake)
    assert store.memos["t:0"].value == str(wake).encode()
    _claim(store, 0)
    assert store.view.state is E.RUNNING


def test_children_are_added_awaited_and_the_last_end_wakes_the_function() -> None:
    store = _running_workflow()
    s = Suspension(ready_at=None, children=(_child(1, 0), _child(2, 1)), awaiting=(1, 2))
    _suspend(store, s)
    assert [x.id for x in store.view.steps] == ["main", "t#0", "t#1"]
    assert store.view.awaiting == ("t#0", "t#1")
    assert store.jobs[0].ready_at == PARKED_AT
    _claim(store, 1)
    _claim(store, 2)
    assert store.view.state is E.WAITING  # a child's claim is not the function's
    t = _child_end(store, 1, S.SUCCEEDED)
    assert (t.awaiting, t.wake) == (("t#1",), ())
    assert store.jobs[0].ready_at == PARKED_AT
    t = _child_end(store, 2, S.DEAD)  # a dead child does not fail the workflow
    assert (t.awaiting, t.wake, t.state) == ((), ("main",), E.WAITING)
    assert store.jobs[0].ready_at == store.now


def test_children_already_finished_ready_the_function_at_once() -> None:
    store = _running_workflow()
    _suspend(store, Suspension(ready_at=None, children=(_child(1, 0),), awaiting=()))
    _claim(store, 1)
    _child_end(store, 1, S.SUCCEEDED)
    store.jobs[0].ready_at = NOW  # woken by something else: here, by hand
    _claim(store, 0)
    _suspend(store, Suspension(ready_at=None, awaiting=(1,)))
    assert store.jobs[0].ready_at == store.now
    assert store.view.awaiting == ()


@pytest.mark.parametrize(
    ("wait_key", "event_key", "at", "delivered"),
    [
        (None, None, 10, True),
        (None, "k", 10, True),  # a wait without a key takes any key
        ("k", "k", 10, True),
        ("k", None, 10, False),
        ("k", "other", 10, False),
        (None, None, 4, False),  # before the wait began
        (None, None, 5, True),  # at its start
        (None, None, 20, False),  # at its timeout
        (None, None, 19, True),
    ],
)
def test_delivers(wait_key: str | None, event_key: str | None, at: int, delivered: bool) -> None:
    wait = EventWait(memo_key="d:0", name="n", key=wait_key, since=5, until=20)
    assert workflow.delivers(wait, event_key, at) is delivered


def test_first_delivery_takes_the_earliest_matching_event_sent_by_now() -> None:
    wait = EventWait(memo_key="d:0", name="n", key="k", since=5, until=None)

    def ev(name: str, key: str | None, at: int) -> StoredEvent:
        return StoredEvent(name=name, key=key, data=str(at).encode(), at=at)

    events = [ev("n", "k", 4), ev("m", "k", 6), ev("n", "x", 7), ev("n", "k", 8), ev("n", "k", 9)]
    assert workflow.first_delivery(wait, events, 100) == events[3]
    assert workflow.first_delivery(wait, events, 7) is None  # 8 was not sent yet at 7


def test_an_event_found_at_suspension_is_delivered_instead_of_a_wait() -> None:
    store = _running_workflow()
    wait = EventWait(memo_key="d:0", name="n", key=None, since=NOW - 5, until=None)
    found = StoredEvent(name="n", key=None, data=b'"yes"', at=NOW - 1)
    _suspend(store, Suspension(ready_at=None, wait=wait), found)
    assert store.memos["d:0"].value == b'"yes"'
    assert store.waits == {}
    assert store.jobs[0].ready_at == store.now


def test_a_wait_is_registered_and_a_delivery_wakes_once() -> None:
    store = _running_workflow()
    wait = EventWait(memo_key="d:0", name="n", key=None, since=NOW, until=NOW + 50)
    _suspend(store, Suspension(ready_at=NOW + 50, wait=wait))
    assert store.waits == {"d:0": wait}
    assert store.jobs[0].ready_at == NOW + 50
    store.now += 10
    store.apply(workflow.deliver_ops(wait, b"1"))
    assert (store.memos["d:0"].value, store.waits) == (b"1", {})
    assert store.jobs[0].ready_at == store.now


def test_a_suspension_of_a_cancelled_workflow_ends_the_function_not_run() -> None:
    store = _running_workflow()
    before = store.view
    t = decide.cancel(before, store.now)
    store.apply(plan.ops(t, plan.index_of(before.steps), {"main": S.RUNNING}.__getitem__))
    assert store.view.state is E.CANCELLING
    _suspend(store, Suspension(ready_at=NOW + 5, memos=(MemoPut("t:0", b"1"),)))
    assert store.view.state is E.CANCELLED
    assert store.view.steps[0].state is S.NOT_RUN
    assert store.memos == {}  # nothing of the suspension is applied


def test_the_function_s_end_decides_the_workflow() -> None:
    store = _running_workflow()
    _suspend(store, Suspension(ready_at=NOW, children=(_child(1, 0),)))
    _claim(store, 0)
    done = _child_end(store, 0, S.SUCCEEDED)
    assert (done.state, done.finished) == (E.SUCCEEDED, True)
    assert store.view.steps[1].state is S.QUEUED  # a child not waited for is left to run
    failed = _running_workflow()
    t = _child_end(failed, 0, S.DEAD)
    assert (t.state, t.reason, t.failed_step) == (E.FAILED, ExecutionReason.STEP_FAILED, "main")


def test_a_waiting_workflow_times_out_at_its_deadline() -> None:
    store = _running_workflow()
    store.view = replace(store.view, deadline_at=NOW + 100)
    _suspend(store, Suspension(ready_at=None, children=(_child(1, 0),), awaiting=(1,)))
    _claim(store, 1)
    before = store.view
    t = decide.advance(before, NOW + 100)
    assert (t.state, t.time_out, t.not_run, t.awaiting) == (E.TIMED_OUT, ("t#0",), ("main",), ())
    store.apply(plan.ops(t, plan.index_of(before.steps), {s.id: s.state for s in before.steps}.get))  # type: ignore[arg-type]
    assert store.view == decide.apply(before, t)
    assert store.jobs[0].state is JobState.CANCELLED
    assert store.jobs[1].state is JobState.TIMED_OUT


def test_waiting_holds_a_concurrency_place() -> None:
    from queue_core.rules.flows.decide import ExecutionSlot
    from queue_core.rules.flows.spec import ConcurrencySpec

    waiting = [ExecutionSlot("a", E.WAITING, 1)]
    assert decide.admit(ConcurrencySpec(1), waiting).state is E.QUEUED
    assert decide.promote(ConcurrencySpec(1), [*waiting, ExecutionSlot("b", E.QUEUED, 2)]) == ()


# --------------------------------------------------------------------------- resume


def _finish_randomly(rng: random.Random) -> WStore:
    """A random flow run to its end (some steps die): the store and its view."""
    view = ExecutionView(state=E.QUEUED, steps=random_dag(rng), timeout_ms=500)
    store = WStore(view)
    store.apply(plan.start_ops(view, plan.index_of(view.steps), Admission(E.RUNNING), NOW))
    while not store.view.state.finished:
        queued = [i for i, s in enumerate(store.view.steps) if s.state is S.QUEUED]
        i = rng.choice(queued)
        before = store.view
        sid = before.steps[i].id
        store.apply(plan.claim_ops(plan.index_of(before.steps), sid))
        store.jobs[i].state = JobState.RUNNING
        before = store.view
        end = rng.choice([S.SUCCEEDED] * 4 + [S.DEAD])
        store.end_job(i, end)
        t = decide.step_ended(before, sid, end, store.now)
        store.apply(
            plan.ops(
                t, plan.index_of(before.steps), {s.id: s.state for s in before.steps}.__getitem__
            )
        )
    return store


@pytest.mark.parametrize("seed", range(200))
def test_a_resume_reruns_what_failed_and_keeps_what_succeeded(seed: int) -> None:
    rng = random.Random(seed)
    store = _finish_randomly(rng)
    before = store.view
    index = plan.index_of(before.steps)
    succeeded = {s.id for s in before.steps if s.state is S.SUCCEEDED}
    from_step = rng.choice([None, rng.choice(before.steps).id])
    if from_step is None and before.state is E.SUCCEEDED:
        with pytest.raises(ConfigError):
            workflow.check_resume("x", before, None)
        return
    workflow.check_resume("x", before, from_step)
    store.now += 7
    ops = workflow.resume_ops(before, index, Admission(E.RUNNING), store.now, from_step=from_step)
    store.apply(ops)
    after = store.view
    redo = set(index.ids) - succeeded
    if from_step is not None:
        todo = [index.pos[from_step]]
        while todo:
            j = todo.pop()
            redo.add(index.ids[j])
            todo.extend(index.dependents[j])
    assert store.reopened and not store.finished
    assert (after.state, after.reason, after.failed_step) == (E.RUNNING, None, None)
    assert after.deadline_at == store.now + 500
    for i, s in enumerate(after.steps):
        if s.id not in redo:
            assert s.state is S.SUCCEEDED
            continue
        ready = all(d not in redo for d in s.depends_on)
        assert s.state is (S.QUEUED if ready else S.PENDING), (s, redo)
        unmet = len({d for d in s.depends_on if d in redo})
        assert store.unmet[i] == unmet
        if ready and i in store.jobs and store.jobs[i].attempts:  # a finished job re-runs
            assert store.jobs[i].state is JobState.QUEUED
            assert store.jobs[i].budget == store.jobs[i].attempts + 1


def test_a_workflow_replay_drops_the_memo_of_its_step_and_every_later_one() -> None:
    store = _running_workflow()
    for key in ("s:a", "c:0", "s:b", "t:0"):
        store.apply([plan.PutMemo(key, json.dumps({"idx": 1}).encode() if key == "c:0" else b"1")])
    store.apply(
        plan.ops(
            decide.step_ended(store.view, "main", S.SUCCEEDED, NOW),
            plan.index_of(store.view.steps),
            {"main": S.RUNNING}.__getitem__,
        )
    )
    done = store.view
    assert done.state is E.SUCCEEDED
    index = plan.index_of(done.steps)
    with pytest.raises(ConfigError) as unknown:
        workflow.check_resume("x", done, "zz", store.memos)
    assert unknown.value.field == "step_id"
    workflow.check_resume("x", done, "b", store.memos)
    ops = workflow.resume_ops(
        done, index, Admission(E.RUNNING), NOW + 1, from_step="b", memos=store.memos
    )
    assert plan.DropMemos(("s:b", "t:0")) in ops
    store.apply(ops)
    assert sorted(store.memos) == ["c:0", "s:a"]
    assert (store.view.state, store.view.steps[0].state) == (E.RUNNING, S.QUEUED)
    everything = workflow.resume_ops(
        done, index, Admission(E.RUNNING), NOW, from_step="main", memos=store.memos
    )
    assert plan.DropMemos(("c:0", "s:a")) in everything


def test_a_resume_refuses_what_it_cannot_do() -> None:
    running = ExecutionView(state=E.RUNNING, steps=(StepView("a", S.RUNNING),))
    with pytest.raises(ConfigError, match="retry\\(\\) resumes a failed"):
        workflow.check_resume("x", running, None)
    with pytest.raises(ConfigError, match="needs a finished execution"):
        workflow.check_resume("x", running, "a")
    failed = replace(running, state=E.FAILED, steps=(StepView("a", S.DEAD),))
    index = plan.index_of(failed.steps)
    with pytest.raises(ConfigError) as full:
        workflow.resume_ops(failed, index, Admission(E.SKIPPED), NOW)
    assert full.value.code == "concurrency_limit"
    queued = workflow.resume_ops(failed, index, Admission(E.QUEUED), NOW)
    assert queued[-1] == plan.SetExecution(E.QUEUED, None, None, None)


def test_a_sub_execution_maps_to_its_parent_step() -> None:
    assert [workflow.sub_step_state(s) for s in E] == [
        S.QUEUED, S.RUNNING, S.RUNNING, S.RUNNING, S.SUCCEEDED, S.DEAD, S.TIMED_OUT,
        S.CANCELLED, S.SKIPPED,
    ]  # fmt: skip
    ops = workflow.child_flow_ops(3, "sub#0", "c:1", E.RUNNING)
    assert ops == [
        plan.AddStep("sub#0", 3, S.RUNNING, None),
        plan.PutMemo("c:1", b'{"idx":3,"flow":true}'),
    ]

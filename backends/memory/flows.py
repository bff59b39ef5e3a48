"""Flow executions of ``memory://``: the reference ``SupportsFlows`` (and the storage half
of ``SupportsWorkflows``: memos, event waits, children, resumes).

Each event reads the execution, lets the core decide and plan it
(:mod:`queue_core.rules.flows.plan`, :mod:`queue_core.rules.flows.workflow`) and applies
the plan with :meth:`MemoryFlows._apply`, the one interpreter, under the store's lock, in
the locked step of the job change that caused it. A decision taken on the whole execution
is checked: the stored view must equal ``decide.apply(before, t)`` (and a small
execution's fast step end must equal the decision on the whole execution). A succeeded
step's result is kept with the execution, so ``get_step_inputs`` works after retention
pruned the dependency's job.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from backends.memory.records import Job
from backends.memory.store import MemoryStore
from queue_core.records.errors import NotFound, StorageError
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState, NewJob, ReapedJob
from queue_core.records.workflows import EventWait, MemoRecord, StoredEvent, Suspension
from queue_core.rules.flows import decide, plan, workflow
from queue_core.rules.flows.decide import Admission, ExecutionSlot, ExecutionView, Transition
from queue_core.rules.flows.decide_fast import ExecutionHead, StepIndex
from queue_core.rules.leases import reap_cutoff
from queue_core.rules.paging import check_page
from queue_core.storage.flows import ExecutionRecord, NewExecution, StepInputs, StepRecord
from queue_core.storage.workflows import sub_execution_id

__all__ = ["MemoryFlows"]

_E = ExecutionState
_LIVE = (_E.RUNNING, _E.WAITING)
_Check = tuple[ExecutionView, Transition] | None
"""The view and decision a plan came from, when decided on the whole execution."""
_Held = list[tuple[int, StepState, str | None]]
"""Step ends of sub-executions that finished while their parent's plan was applied."""
_CHECKED_STEPS = 64
"""Up to this many steps, a step end decided on the fast path is also decided on the
whole execution and the two must be equal (memory stays an independent reference)."""


@dataclass(slots=True, eq=False)
class _Execution:
    new: NewExecution
    seq: int
    rec: ExecutionRecord
    steps: list[StepRecord]
    index: StepIndex
    counts: Counter[StepState]
    """Steps per state, and below each step's dependencies not succeeded: the fast path."""
    unmet: list[int]
    results: dict[int, bytes | None] = field(default_factory=dict)
    memos: dict[str, MemoRecord] = field(default_factory=dict)
    memo_seq: int = 0
    waits: dict[str, EventWait] = field(default_factory=dict)
    """A workflow's registered event waits, by memo key."""
    child_jobs: dict[int, NewJob] = field(default_factory=dict)
    """The jobs of steps added at run time, as stored (a re-run's budget)."""

    def view(self) -> ExecutionView:
        return self.rec.view(self.steps)

    def prior(self, step_id: str) -> StepState:
        return self.steps[self.index.pos[step_id]].state

    def head(self) -> ExecutionHead:
        r = self.rec
        return ExecutionHead(
            state=r.state,
            max_parallel=r.max_parallel,
            deadline_at=r.deadline_at,
            reason=r.reason,
            failed_step=r.failed_step,
            kind=r.kind,
        )

    def stored_job(self, idx: int) -> NewJob:
        return self.child_jobs[idx] if idx in self.child_jobs else self.new.jobs[idx]


class MemoryFlows:
    """Executions and their steps (built on first use), and the interpreter of their plans.

    The ``SupportsFlows`` methods take the lock; :meth:`claimed`, :meth:`step_ended`,
    :meth:`reap_deadlines` and :meth:`prune` are called by the job parts with it held.
    """

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.executions: dict[str, _Execution] = {}
        """By id, oldest first."""
        self.by_key: dict[str, list[str]] = {}
        """Ids of the unfinished executions of each ``conc_key``."""
        self._seq = itertools.count(1)
        self.waiters: dict[str, dict[tuple[str, str], EventWait]] = {}
        """Registered event waits by event name, then by (execution id, memo key)."""
        self.events: dict[str, dict[int, StoredEvent]] = {}
        """Stored events by name, then by sequence number (pruned with ``store.events``)."""
        self.held: dict[str, _Held] = {}
        """By id, the executions whose plan :meth:`_apply` is applying: the step ends of
        their sub-executions that finished meanwhile (a cancelled sub-execution), held
        until the plan is applied and checked, then decided (``plan.step_end``)."""

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.start_execution`."""
        with self.store.cond:
            state = self.start(new, self.store.now(now))
            self.store.cond.notify_all()
            return state

    def start(self, new: NewExecution, t: int) -> ExecutionState:
        """Store and admit ``new`` at ``t`` (the lock held)."""
        key = new.conc_key
        if new.id in self.executions:
            raise StorageError(f"execution id {new.id!r} already exists")
        rec = ExecutionRecord(
            id=new.id,
            flow=new.flow,
            state=_E.QUEUED,
            reason=None,
            failed_step=None,
            spec_hash=new.spec_hash,
            spec_json=new.spec_json,
            input=new.input,
            max_parallel=new.max_parallel,
            timeout_ms=new.timeout_ms,
            deadline_at=None,
            created_at=t,
            started_at=None,
            finished_at=None,
            conc_key=key,
            kind=new.kind,
            parent_id=new.parent_id,
            parent_idx=new.parent_idx,
        )
        steps = [
            StepRecord(
                execution_id=new.id,
                idx=i,
                step_id=s.id,
                state=s.state,
                reason=None,
                job_id=None,
                depends_on=s.depends_on,
            )
            for i, s in enumerate(new.steps)
        ]
        index = plan.index_of(new.steps)
        e = _Execution(new, next(self._seq), rec, steps, index, Counter(), list(index.unmet))
        e.counts[StepState.PENDING] = len(steps)
        others = self.slots(self.by_key.setdefault(key, [])) if key is not None else []
        admission = decide.admit(new.concurrency, others)
        for old in admission.supersede:  # SPEC §13: before the new one is stored
            assert new.concurrency is not None
            self._supersede(self.executions[old], new.concurrency.behavior, t)
        self.executions[new.id] = e
        if key is not None:
            self.by_key.setdefault(key, []).append(new.id)
        self._apply(e, plan.start_ops(e.view(), index, admission, t), t)
        return e.rec.state

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.cancel_execution`."""
        with self.store.cond:
            e, t = self.get(execution_id), self.store.now(now)
            before = e.view()
            tr = decide.cancel(before, t)
            if tr.changes(before):
                self._apply(e, plan.ops(tr, e.index, e.prior), t, (before, tr))
            self.store.cond.notify_all()
            return e.rec.state

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_execution`."""
        with self.store.cond:
            e = self.executions.get(execution_id)
            return e.rec if e is not None else None

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_executions`."""
        limit, offset = check_page(limit, offset)
        with self.store.cond:
            found = (
                e.rec
                for e in reversed(self.executions.values())
                if (flow is None or e.rec.flow == flow) and (state is None or e.rec.state is state)
            )
            return list(itertools.islice(found, max(offset, 0), max(offset, 0) + max(limit, 0)))

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_steps`."""
        with self.store.cond:
            e = self.executions.get(execution_id)
            return list(e.steps) if e is not None else []

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_step_inputs`."""
        with self.store.cond:
            e = self.get(execution_id)
            if step_id not in e.index.pos:
                raise NotFound(f"execution {execution_id} has no step {step_id!r}")
            deps = e.index.depends_on[e.index.pos[step_id]]
            results = {d: e.results.get(e.index.pos[d]) for d in deps}
            return StepInputs(input=e.new.input, results=results)

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """See :class:`queue_core.storage.abilities.SupportsStepInputsBatch`."""
        out: list[StepInputs | None] = []
        for eid, sid in steps:
            try:
                out.append(self.get_step_inputs(eid, sid))
            except NotFound:
                out.append(None)
        return out

    # ------------------------------------------------------------------ from the job parts

    def claimed(self, job: Job, t: int) -> None:
        """A step's job was claimed: ``plan.claim_ops`` (a waiting workflow runs again)."""
        e = self.executions.get(job.spec.execution_id or "")
        if e is not None and job.spec.step_id is not None:
            self._apply(e, plan.claim_ops(e.index, job.spec.step_id, e.head()), t)

    def step_ended(self, job: Job, t: int) -> list[ReapedJob]:
        """A step's job changed state (finish, reap, cancel): ``plan.step_end``."""
        e = self.executions.get(job.spec.execution_id or "")
        if e is None or job.spec.step_id is None:
            return []
        i = e.index.pos[job.spec.step_id]
        if job.state is JobState.SUCCEEDED:
            e.results[i] = job.result
        return self._step_end(e, i, StepState(job.state), job.reason, t)

    def _step_end(
        self, e: _Execution, i: int, now_state: StepState, reason: str | None, t: int
    ) -> list[ReapedJob]:
        sid, seen = e.index.ids[i], list[ExecutionView]()

        def dependents() -> dict[str, tuple[StepState, int]]:
            return {e.index.ids[d]: (e.steps[d].state, e.unmet[d]) for d in e.index.dependents[i]}

        def full() -> ExecutionView:
            seen.append(e.view())
            return seen[0]

        was = e.steps[i].state
        tr, ops = plan.step_end(
            e.head(), e.index, e.counts, sid, was, now_state, dependents, full, t, reason
        )
        if not seen and len(e.steps) <= _CHECKED_STEPS:
            judged = decide.step_ended(full(), sid, now_state, t)
            assert tr == judged, "the fast path drifted from decide.step_ended"
        return self._apply(e, ops, t, (seen[0], tr) if seen else None)

    def suspended(self, job: Job, suspension: Suspension, t: int) -> None:
        """A workflow's function step was suspended (``finish`` of a ``SuspendedEnd``):
        ``workflow.suspend_ops``, with the first stored event its wait receives."""
        e = self.executions.get(job.spec.execution_id or "")
        if e is None:
            return
        wait, event = suspension.wait, None
        if wait is not None:
            event = workflow.first_delivery(wait, self.stored_events(wait.name), t)
        self._apply(e, workflow.suspend_ops(e.view(), e.index, suspension, t, event), t)

    def stored_events(self, name: str) -> list[StoredEvent]:
        """The stored events of ``name``, earliest first."""
        return sorted(self.events.get(name, {}).values(), key=lambda ev: ev.at)

    def reap_deadlines(self, t: int, limit: int) -> list[ReapedJob]:
        """Running and waiting executions whose deadline passed (``reap_cutoff``: a margin
        after it, so a live worker records its own stop first): ``decide.advance``."""
        heap, reaped = self.store.flow_deadlines, list[ReapedJob]()
        cutoff = reap_cutoff(t)
        while heap and heap[0][0] <= cutoff and len(reaped) < limit:
            deadline, _, eid = heapq.heappop(heap)
            e = self.executions.get(eid)
            if e is None or e.rec.state not in _LIVE or e.rec.deadline_at != deadline:
                continue
            before = e.view()
            tr = decide.advance(before, t)
            reaped += self._apply(e, plan.ops(tr, e.index, e.prior), t, (before, tr))
        return reaped

    def prune(self, cutoff: int, limit: int) -> list[str]:
        """Drop executions finished at or before ``cutoff`` with their memos and
        sub-executions, and the events sent at or before it; the ids of their step jobs,
        which go with them (a workflow's jobs wait for it: :meth:`holds`)."""
        heap, jobs, done = self.store.flows_finished, list[str](), 0
        while heap and heap[0][0] <= cutoff and done < limit:
            at, _, eid = heapq.heappop(heap)
            e = self.executions.get(eid)
            if e is None or e.rec.finished_at != at or not e.rec.state.finished:
                continue  # stale: pruned already, or reopened by a resume
            done += self._drop(e, jobs)
        events = self.store.flow_events
        while events and events[0][0] <= cutoff:
            _, seq, name = heapq.heappop(events)
            kept = self.events.get(name, {})
            kept.pop(seq, None)
            if not kept:
                self.events.pop(name, None)
        return jobs

    def holds(self, job: Job) -> bool:
        """Whether ``job`` is a step job of a workflow still stored: prune leaves it to
        go with its execution (its result, state and dead letter are the function's)."""
        e = self.executions.get(job.spec.execution_id or "")
        return e is not None and e.rec.kind == decide.WORKFLOW

    def _drop(self, e: _Execution, jobs: list[str]) -> int:
        del self.executions[e.rec.id]
        done = 1
        for step in e.steps:
            if step.job_id is not None:
                jobs.append(step.job_id)
            sub = self.executions.get(sub_execution_id(e.rec.id, step.idx))
            if step.job_id is None and sub is not None and sub.rec.state.finished:
                done += self._drop(sub, jobs)
        return done

    # ------------------------------------------------------------------ the interpreter

    def _apply(
        self, e: _Execution, ops: list[plan.Op], t: int, check: _Check = None
    ) -> list[ReapedJob]:
        """Apply ``ops`` in order (:mod:`~queue_core.rules.flows.plan` says what each does);
        return the running step jobs they ended. A sub-execution the plan cancels and that
        finishes at once ends its step here only after the plan (:attr:`held`): the plan
        is applied and checked whole, as it was decided."""
        added = len(e.steps)
        outer, held = self.held.get(e.rec.id), _Held()
        self.held[e.rec.id] = held
        try:
            reaped, grown = self._interpret(e, ops, t)
        finally:
            if outer is None:
                del self.held[e.rec.id]
            else:
                self.held[e.rec.id] = outer
        if grown:
            e.index = plan.index_of(e.view().steps)
            for step in e.steps[added:]:  # a child job stored ``skipped`` (its skip limit)
                job = self.store.jobs.get(step.job_id or "")
                if job is not None and job.state.finished and not step.state.finished:
                    self._step_end(e, step.idx, StepState(job.state), job.reason, t)
        if check is not None:
            assert e.view() == decide.apply(*check), "memory drifted from decide.apply"
        for idx, state, reason in held:
            reaped += self._step_end(e, idx, state, reason, t)
        if any(isinstance(op, plan.Finished) for op in ops):
            self._finished(e, t)
        return reaped

    def _interpret(self, e: _Execution, ops: list[plan.Op], t: int) -> tuple[list[ReapedJob], bool]:
        """Each of ``ops`` in order: (the running step jobs they ended, a step added)."""
        reaped: list[ReapedJob] = []
        grown = False
        for op in ops:
            if isinstance(op, (plan.SetExecution, plan.Started, plan.Finished, plan.Reopened)):
                self._execution_op(e, op, t)
            elif isinstance(op, (plan.SetStep, plan.Release, plan.SetUnmet)):
                self._step_op(e, op, t)
            elif isinstance(op, (plan.EndJob, plan.RequestCancel, plan.SetReady, plan.Wake)):
                reaped += self._job_op(e, op, t)
            else:
                grown = self._workflow_op(e, op, t) or grown
        return reaped, grown

    def _execution_op(
        self,
        e: _Execution,
        op: plan.SetExecution | plan.Started | plan.Finished | plan.Reopened,
        t: int,
    ) -> None:
        if isinstance(op, plan.SetExecution):
            e.rec = replace(
                e.rec,
                state=op.state,
                reason=op.reason,
                failed_step=op.failed_step,
                deadline_at=op.deadline_at,
            )
        elif isinstance(op, plan.Started):
            e.rec = replace(e.rec, started_at=t)
            if op.deadline_at is not None:
                heapq.heappush(self.store.flow_deadlines, (op.deadline_at, e.seq, e.rec.id))
        elif isinstance(op, plan.Reopened):
            e.rec = replace(e.rec, finished_at=None)
            if e.rec.conc_key is not None:
                self.by_key.setdefault(e.rec.conc_key, []).append(e.rec.id)
        else:
            e.rec = replace(e.rec, finished_at=t)
            heapq.heappush(self.store.flows_finished, (t, e.seq, e.rec.id))

    def _step_op(
        self, e: _Execution, op: plan.SetStep | plan.Release | plan.SetUnmet, t: int
    ) -> None:
        step = e.steps[op.idx]
        if isinstance(op, plan.SetUnmet):
            e.unmet[op.idx] = op.unmet
            return
        if isinstance(op, plan.Release):  # its job is stored as the execution's; idempotent
            spec = replace(e.stored_job(op.idx), flow_deadline_at=op.deadline_at)
            e.steps[op.idx] = replace(step, job_id=spec.id)
            job = self.store.jobs.get(spec.id)
            if job is None:
                self.store.add(spec, t)
            elif job.state.finished:
                self._rerun(job, spec, t)
            return
        assert step.state is op.was, (op, step)
        e.steps[op.idx] = replace(step, state=op.state, reason=op.reason)
        e.counts[op.was] -= 1
        e.counts[op.state] += 1
        for d in op.dependents:
            e.unmet[d] -= 1

    def _rerun(self, job: Job, spec: NewJob, t: int) -> None:
        """A finished step job runs again (``Release`` after a resume): fresh budget."""
        store = self.store
        entry = store.dead.get(job.dead_id or "")
        if entry is not None:
            store.drop_dead(entry)
        job.spec = replace(spec, max_attempts=job.attempt + spec.max_attempts)
        job.result = job.error = job.reason = job.finished_at = job.dead_id = None
        job.cancel_requested = False
        job.ready_at = t
        store.enter(job, JobState.QUEUED)

    def _job_op(
        self,
        e: _Execution,
        op: plan.EndJob | plan.RequestCancel | plan.SetReady | plan.Wake,
        t: int,
    ) -> list[ReapedJob]:
        """The step's job, if released and in the state the operation expects."""
        job_id = e.steps[op.idx].job_id
        if job_id is None and isinstance(op, (plan.EndJob, plan.RequestCancel)):
            self._cancel_sub(e, op.idx, t)  # the step stands for a sub-execution
            return []
        job = self.store.jobs.get(job_id or "")
        if isinstance(op, (plan.SetReady, plan.Wake)):
            if job is not None and job.state is JobState.QUEUED:
                self.store.reschedule(job, t if isinstance(op, plan.Wake) else op.at)
            return []
        if isinstance(op, plan.RequestCancel):
            if job is not None and job.state is JobState.RUNNING:
                job.cancel_requested = True
            return []
        if job is None or job.state is not op.when:
            return []
        self.store.end(job, op.state, op.reason, t)
        if op.when is not JobState.RUNNING:
            return []
        attempt = job.attempts[-1]
        attempt.outcome, attempt.reason, attempt.finished_at = op.outcome, op.reason, t
        return [
            ReapedJob(
                job_id=job.id,
                attempt=attempt.number,
                outcome=op.outcome,
                reason=op.reason,
                state=op.state,
            )
        ]

    def _workflow_op(self, e: _Execution, op: plan.Op, t: int) -> bool:
        """The operations only workflows use; ``True`` when a step was added."""
        if isinstance(op, plan.PutMemo):
            old = e.memos.get(op.key)
            if old is None:
                e.memo_seq += 1
            seq = e.memo_seq if old is None else old.seq
            e.memos[op.key] = MemoRecord(key=op.key, value=op.value, seq=seq, at=t)
        elif isinstance(op, plan.DropMemos):
            for key in op.keys:
                e.memos.pop(key, None)
        elif isinstance(op, plan.AddStep):
            return self._add_step(e, op, t)
        elif isinstance(op, plan.SetAwaiting):
            e.rec = replace(e.rec, awaiting=op.idxs)
        elif isinstance(op, plan.AddWaiter):
            e.waits[op.wait.memo_key] = op.wait
            self.waiters.setdefault(op.wait.name, {})[(e.rec.id, op.wait.memo_key)] = op.wait
        elif isinstance(op, plan.DropWaiter):
            self._drop_wait(e, op.memo_key)
        else:
            raise AssertionError(f"unknown plan operation {op!r}")
        return False

    def _add_step(self, e: _Execution, op: plan.AddStep, t: int) -> bool:
        if op.idx != len(e.steps):
            raise StorageError(f"step index {op.idx} is not the next one ({len(e.steps)})")
        job_id = None if op.job is None else op.job.id
        rec = StepRecord(
            execution_id=e.rec.id,
            idx=op.idx,
            step_id=op.step,
            state=op.state,
            reason=None,
            job_id=job_id,
        )
        e.steps.append(rec)
        e.counts[op.state] += 1
        e.unmet.append(0)
        if op.job is not None:
            e.child_jobs[op.idx] = op.job
            if op.job.id not in self.store.jobs:
                self.store.add(op.job, t)
        return True

    def _drop_wait(self, e: _Execution, memo_key: str) -> None:
        wait = e.waits.pop(memo_key, None)
        if wait is not None:
            by_name = self.waiters.get(wait.name, {})
            by_name.pop((e.rec.id, memo_key), None)
            if not by_name:
                self.waiters.pop(wait.name, None)

    def _cancel_sub(self, e: _Execution, idx: int, t: int) -> None:
        sub = self.executions.get(sub_execution_id(e.rec.id, idx))
        if sub is not None:
            before = sub.view()
            tr = decide.cancel(before, t)
            if tr.changes(before):
                self._apply(sub, plan.ops(tr, sub.index, sub.prior), t, (before, tr))

    def _finished(self, e: _Execution, t: int) -> None:
        """A finished execution drops its waits, frees its place (``decide.promote``, then
        each promoted one starts) and, as a sub-execution, ends its parent's step (after
        the parent's plan when one is being applied: :attr:`held`)."""
        for key in list(e.waits):
            self._drop_wait(e, key)
        self._promote(e, t)
        parent = self.executions.get(e.rec.parent_id or "")
        if parent is not None and e.rec.parent_idx is not None:
            state = workflow.sub_step_state(e.rec.state)
            reason = None if e.rec.reason is None else e.rec.reason.value
            held = self.held.get(parent.rec.id)
            if held is not None:
                held.append((e.rec.parent_idx, state, reason))
            else:
                self._step_end(parent, e.rec.parent_idx, state, reason, t)

    def _promote(self, e: _Execution, t: int) -> None:
        """A finished execution frees its place: ``decide.promote``, then each starts."""
        key = e.rec.conc_key
        if key is None:
            return
        active = self.by_key[key] = [i for i in self.by_key.get(key, []) if i != e.rec.id]
        for eid in decide.promote(e.new.concurrency, self.slots(active)):
            q = self.executions[eid]
            self._apply(q, plan.start_ops(q.view(), q.index, Admission(_E.RUNNING), t), t)
        if not self.by_key.get(key):
            self.by_key.pop(key, None)

    def _supersede(self, e: _Execution, behavior: str, t: int) -> None:
        """A newer execution took ``e``'s place: ``plan.supersede_ops``."""
        before = e.view()
        tr, ops = plan.supersede_ops(before, e.index, behavior, t)
        self._apply(e, ops, t, None if tr is None else (before, tr))

    def slots(self, ids: list[str]) -> list[ExecutionSlot]:
        recs = [self.executions[i].rec for i in ids]
        return [ExecutionSlot(r.id, r.state, r.created_at) for r in recs]

    def get(self, execution_id: str) -> _Execution:
        """The execution (``NotFound`` for an unknown id)."""
        e = self.executions.get(execution_id)
        if e is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return e

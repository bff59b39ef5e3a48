"""Flow executions of ``memory://``: the reference for :class:`SupportsFlows`.

Every change to an execution builds its :class:`~queue_core.flows.decide.ExecutionView`
from the dicts below, calls a function of :mod:`queue_core.flows.decide` and applies the
returned :class:`~queue_core.flows.decide.Transition` in the order of the design
(``docs/design/flows-storage.md`` §3), all under the storage's one lock, so the event
and its consequences are one atomic step. After applying, the stored view is checked
against :func:`queue_core.flows.decide.apply` (the pure reference of "applying").

:class:`MemoryFlows` is mixed into :class:`backends.memory.MemoryStorage` (the public
operations); :class:`FlowBook` holds the records and is called by the storage's
``finish`` / ``reap`` / ``cancel`` / ``prune`` / ``claim`` for step jobs.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from queue_core.errors import NotFound, StorageError
from queue_core.flows import decide
from queue_core.flows.decide import ExecutionSlot, ExecutionView, StepView, Transition
from queue_core.flows.model import ExecutionReason, ExecutionState, StepState
from queue_core.flows.storage import (
    ExecutionRecord,
    NewExecution,
    StepInputs,
    StepRecord,
    step_job_id,
)
from queue_core.model import JobState, NewJob, Outcome, ReapedJob, Reason

if TYPE_CHECKING:
    from backends._memory_records import _Job

__all__ = ["FlowBook", "MemoryFlows"]

_E = ExecutionState


class _Host(Protocol):
    """What the flow book needs of the storage that owns it (called under its lock)."""

    _jobs: dict[str, _Job]

    def _add_job(self, spec: NewJob, t: int) -> _Job: ...

    def _end(self, job: _Job, state: JobState, reason: str | None, now: int) -> None: ...


@dataclass(slots=True)
class _Step:
    idx: int
    id: str
    deps: tuple[str, ...]
    state: StepState = StepState.PENDING
    reason: str | None = None
    job_id: str | None = None
    result: bytes | None = None
    """A succeeded step's result, kept with the step (its job may be pruned first)."""
    seen: StepView = field(init=False)
    """The step as the decisions see it (kept in step with ``state``: views are cheap)."""

    def __post_init__(self) -> None:
        self.seen = StepView(self.id, self.state, self.deps)

    def set(self, state: StepState, reason: str | None) -> None:
        self.state, self.reason = state, reason
        self.seen = StepView(self.id, state, self.deps)


@dataclass(slots=True)
class _Execution:
    new: NewExecution
    seq: int
    created_at: int
    steps: list[_Step]
    by_id: dict[str, _Step] = field(default_factory=dict)
    state: ExecutionState = _E.QUEUED
    reason: ExecutionReason | None = None
    failed_step: str | None = None
    deadline_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None

    @property
    def id(self) -> str:
        return self.new.id

    def view(self) -> ExecutionView:
        return ExecutionView(
            state=self.state,
            steps=tuple(s.seen for s in self.steps),
            max_parallel=self.new.max_parallel,
            timeout_ms=self.new.timeout_ms,
            deadline_at=self.deadline_at,
            reason=self.reason,
            failed_step=self.failed_step,
        )

    def slot(self) -> ExecutionSlot:
        return ExecutionSlot(self.id, self.state, self.created_at)

    def record(self) -> ExecutionRecord:
        n = self.new
        return ExecutionRecord(
            id=n.id,
            flow=n.flow,
            state=self.state,
            reason=self.reason,
            failed_step=self.failed_step,
            spec_hash=n.spec_hash,
            spec_json=n.spec_json,
            input=n.input,
            max_parallel=n.max_parallel,
            timeout_ms=n.timeout_ms,
            deadline_at=self.deadline_at,
            created_at=self.created_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            conc_key=n.conc_key,
        )


class FlowBook:
    """Executions, their steps and the indexes the reaper and prune read."""

    def __init__(self, host: _Host) -> None:
        self._host = host
        self._seq = 0
        self.executions: dict[str, _Execution] = {}
        """By id, in start order (dicts keep insertion order: oldest first)."""
        self._active_by_key: dict[str, list[str]] = {}
        """Ids of the queued/running/cancelling executions of each ``conc_key``."""
        self._deadlines: list[tuple[int, int, str]] = []
        """``(deadline_at, seq, id)`` of executions that started with a deadline."""
        self._finished: list[tuple[int, int, str]] = []
        """``(finished_at, seq, id)`` for prune."""

    # ------------------------------------------------------------------ events

    def start(self, new: NewExecution, t: int) -> ExecutionState:
        if new.id in self.executions:
            raise StorageError(f"execution id {new.id!r} already exists")
        self._seq += 1
        steps = [_Step(i, s.id, s.depends_on) for i, s in enumerate(new.steps)]
        e = _Execution(new, self._seq, t, steps, {s.id: s for s in steps})
        key = new.conc_key
        others = [self.executions[i].slot() for i in self._active_by_key.get(key or "", [])]
        admission = decide.admit(new.concurrency, others)
        self.executions[e.id] = e
        if admission.state is _E.SKIPPED:
            e.state, e.reason, e.finished_at = admission.state, admission.reason, t
            for s in steps:
                s.set(StepState.NOT_RUN, ExecutionReason.CONCURRENCY_LIMIT.value)
            heapq.heappush(self._finished, (t, e.seq, e.id))
            return e.state
        if key is not None:
            self._active_by_key.setdefault(key, []).append(e.id)
        if admission.state is _E.RUNNING:
            self._apply(e, decide.start(e.view(), t), t)
        return e.state

    def cancel(self, execution_id: str, t: int) -> ExecutionState:
        e = self.executions.get(execution_id)
        if e is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        transition = decide.cancel(e.view(), t)
        if transition.changes(e.view()):
            self._apply(e, transition, t)
        return e.state

    def job_ended(self, job: _Job, t: int) -> list[ReapedJob]:
        """A step job changed state by an event (finish, reap, cancel): ``step_ended``."""
        e = self.executions.get(job.spec.execution_id or "")
        step_id = job.spec.step_id
        if e is None or step_id is None:
            return []
        step = e.by_id[step_id]
        if job.state is JobState.SUCCEEDED:
            step.result = job.result
        return self._apply(e, decide.step_ended(e.view(), step_id, StepState(job.state), t), t)

    def job_started(self, job: _Job) -> None:
        """A step job was claimed: its step is ``running``."""
        e = self.executions.get(job.spec.execution_id or "")
        if e is not None and job.spec.step_id in e.by_id:
            step = e.by_id[job.spec.step_id]
            step.set(StepState.RUNNING, None)

    def reap_deadlines(self, t: int, limit: int) -> list[ReapedJob]:
        """Running executions whose deadline passed end ``timed_out`` (``advance``)."""
        reaped: list[ReapedJob] = []
        heap = self._deadlines
        while heap and heap[0][0] <= t and len(reaped) < limit:
            deadline, _, eid = heapq.heappop(heap)
            e = self.executions.get(eid)
            if e is None or e.state is not _E.RUNNING or e.deadline_at != deadline:
                continue
            reaped += self._apply(e, decide.advance(e.view(), t), t)
        return reaped

    def prune(self, cutoff: int, limit: int) -> int:
        """Drop finished executions (and their steps) finished at or before ``cutoff``.
        Their step jobs, all finished no later than the execution, go with the jobs."""
        done = 0
        while self._finished and self._finished[0][0] <= cutoff and done < limit:
            _, _, eid = heapq.heappop(self._finished)
            if self.executions.pop(eid, None) is not None:
                done += 1
        return done

    # ------------------------------------------------------------------ applying

    def _apply(self, e: _Execution, tr: Transition, t: int) -> list[ReapedJob]:
        """Apply ``tr`` in the design's order; return the step jobs it timed out."""
        before = e.view()
        for step_id, state in tr.ended:
            step = e.by_id[step_id]
            job = self._host._jobs.get(step.job_id or "")
            step.set(state, job.reason if job is not None else None)
        e.state, e.reason, e.failed_step, e.deadline_at = (
            tr.state,
            tr.reason,
            tr.failed_step,
            tr.deadline_at,
        )
        if tr.started:
            e.started_at = t
            if e.deadline_at is not None:
                heapq.heappush(self._deadlines, (e.deadline_at, e.seq, e.id))
        if tr.finished:
            e.finished_at = t
            heapq.heappush(self._finished, (t, e.seq, e.id))
        reaped = [self._time_out(e.by_id[s], t) for s in tr.time_out]
        for step_id in tr.not_run:
            self._not_run(e.by_id[step_id], tr.not_run_reason, t)
        for step_id in tr.cancel:
            job = self._host._jobs.get(e.by_id[step_id].job_id or "")
            if job is not None and job.state is JobState.RUNNING:
                job.cancel_requested = True
        for step_id in tr.release:
            self._release(e, e.by_id[step_id], t)
        assert e.view() == decide.apply(before, tr), "memory drifted from decide.apply"
        if tr.finished:
            self._promote(e, t)
        return [r for r in reaped if r is not None]

    def _time_out(self, step: _Step, t: int) -> ReapedJob | None:
        step.set(StepState.TIMED_OUT, Reason.FLOW_TIMEOUT.value)
        job = self._host._jobs.get(step.job_id or "")
        if job is None or job.state is not JobState.RUNNING:
            return None
        attempt = job.attempts[-1]
        attempt.outcome, attempt.reason = Outcome.TIMED_OUT, Reason.FLOW_TIMEOUT.value
        attempt.finished_at = t
        self._host._end(job, JobState.TIMED_OUT, Reason.FLOW_TIMEOUT.value, t)
        return ReapedJob(
            job_id=job.id,
            attempt=attempt.number,
            outcome=Outcome.TIMED_OUT,
            reason=Reason.FLOW_TIMEOUT.value,
            state=JobState.TIMED_OUT,
        )

    def _not_run(self, step: _Step, reason: ExecutionReason | None, t: int) -> None:
        step.set(StepState.NOT_RUN, reason.value if reason else None)
        job = self._host._jobs.get(step.job_id or "")
        if job is not None and job.state is JobState.QUEUED:
            self._host._end(job, JobState.CANCELLED, Reason.NOT_RUN.value, t)

    def _release(self, e: _Execution, step: _Step, t: int) -> None:
        step.set(StepState.QUEUED, None)
        step.job_id = step_job_id(e.id, step.idx)
        spec = replace(e.new.jobs[step.idx], flow_deadline_at=e.deadline_at)
        self._host._add_job(spec, t)

    def _promote(self, e: _Execution, t: int) -> None:
        key = e.new.conc_key
        if key is None:
            return
        active = [i for i in self._active_by_key.get(key, []) if i != e.id]
        self._active_by_key[key] = active
        slots = [self.executions[i].slot() for i in active]
        for eid in decide.promote(e.new.concurrency, slots):
            queued = self.executions[eid]
            self._apply(queued, decide.start(queued.view(), t), t)
        if not self._active_by_key[key]:
            del self._active_by_key[key]

    # ------------------------------------------------------------------ reads

    def get(self, execution_id: str) -> _Execution:
        e = self.executions.get(execution_id)
        if e is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return e

    def steps(self, execution_id: str) -> list[StepRecord]:
        e = self.executions.get(execution_id)
        if e is None:
            return []
        return [
            StepRecord(
                execution_id=e.id,
                idx=s.idx,
                step_id=s.id,
                state=s.state,
                reason=s.reason,
                job_id=s.job_id,
                depends_on=s.deps,
            )
            for s in e.steps
        ]

    def inputs(self, execution_id: str, step_id: str) -> StepInputs:
        e = self.get(execution_id)
        step = e.by_id.get(step_id)
        if step is None:
            raise NotFound(f"execution {execution_id} has no step {step_id!r}")
        return StepInputs(input=e.new.input, results={d: e.by_id[d].result for d in step.deps})


class MemoryFlows:
    """The public :class:`~queue_core.flows.storage.SupportsFlows` operations of
    ``memory://``, each under the storage's lock."""

    _cond: threading.Condition
    _clock: Callable[[], int]
    _flows: FlowBook

    def _flow_now(self, now: int | None) -> int:
        return self._clock() if now is None else now

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.flows.storage.SupportsFlows.start_execution`."""
        with self._cond:
            state = self._flows.start(new, self._flow_now(now))
            self._cond.notify_all()
            return state

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.flows.storage.SupportsFlows.cancel_execution`."""
        with self._cond:
            state = self._flows.cancel(execution_id, self._flow_now(now))
            self._cond.notify_all()
            return state

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.flows.storage.SupportsFlows.get_execution`."""
        with self._cond:
            e = self._flows.executions.get(execution_id)
            return e.record() if e is not None else None

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.flows.storage.SupportsFlows.list_executions`."""
        with self._cond:
            out: list[ExecutionRecord] = []
            skip = max(offset, 0)
            for e in reversed(self._flows.executions.values()):
                if len(out) >= max(limit, 0):
                    break
                if (flow is None or e.new.flow == flow) and (state is None or e.state is state):
                    if skip:
                        skip -= 1
                    else:
                        out.append(e.record())
            return out

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.flows.storage.SupportsFlows.list_steps`."""
        with self._cond:
            return self._flows.steps(execution_id)

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.flows.storage.SupportsFlows.get_step_inputs`."""
        with self._cond:
            return self._flows.inputs(execution_id, step_id)

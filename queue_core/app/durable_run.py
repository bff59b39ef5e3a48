"""One attempt of a workflow's function, replayed against what storage remembers (SPEC §12).

:class:`WorkflowRun` is the engine behind :class:`~queue_core.app.durable.DurableContext`:
it reads the execution once when the attempt starts
(:meth:`~queue_core.storage.abilities.SupportsWorkflows.workflow_state`), then answers each
``ctx`` call in order from the memos (:mod:`queue_core.records.workflows` lists their
keys): a finished step returns its stored result, a sleep already over returns, a
delivered event returns its data, a finished child its result. Where the function must
wait, :meth:`WorkflowRun.suspend` raises :class:`Suspend` with the
:class:`~queue_core.records.workflows.Suspension` storage applies when the attempt ends.

Its clock is storage's: the attempt's start as storage stamped it at the claim (for an
attempt held ahead of a free slot, plus the time it was held), plus the time elapsed
since the body started on the worker's monotonic clock (``ctx.started_at`` and
``ctx.started_mono``). So a wake time, an event wait's start and its timeout are all on
the clock storage judges them by, and none runs behind it by the time the attempt took
to start.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from queue_core.app.execution_control import controlled
from queue_core.records.errors import (
    ChildFailed,
    ConfigError,
    EventTimeout,
    ExecutionFailed,
    JobCancelled,
    JobSkipped,
    SerializationError,
    StorageUnavailable,
)
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState, LeaseRef, NewJob
from queue_core.records.workflows import EventWait, MemoPut, NewChild, Suspension
from queue_core.rules import classify
from queue_core.rules.flows.workflow import sub_step_state
from queue_core.storage.abilities import SupportsFlows, SupportsResultLimit, SupportsWorkflows
from queue_core.storage.flows import ExecutionRecord, NewExecution, StepRecord, step_job_id
from queue_core.storage.workflows import WorkflowState, sub_execution_id

if TYPE_CHECKING:
    from queue_core.app.handle import HandleOwner
    from queue_core.app.serializer import Serializer
    from queue_core.app.task import Task
    from queue_core.rules import RetryPolicy
    from queue_core.storage.protocol import Storage

__all__ = [
    "Child",
    "SubFlow",
    "Suspend",
    "WorkflowRun",
    "execution_value",
    "own_storage_call",
    "retrying",
]

_MAX_STEP_ID = 200


@contextmanager
def own_storage_call() -> Iterator[None]:
    """Around a storage call queue-core makes inside a workflow's body on the attempt's
    behalf (its run read, a memo write, a child's start, a sub-execution's read): a
    ``StorageUnavailable`` raised there is marked ``during_attempt``, and the worker gives
    the attempt back without spending it (a storage fault is never the job's, issue 26).
    The same error raised by the body's own code is the body's."""
    try:
        yield
    except StorageUnavailable as exc:
        exc.during_attempt = True
        raise


class Suspend(BaseException):  # noqa: N818 - control flow, not an error
    """The function stops here to wait. A ``BaseException``, so that a workflow's
    ``except Exception`` around a ``ctx`` call cannot swallow it; the workflow's body
    turns it into :class:`~queue_core.app.durable.Suspended` for the worker."""

    def __init__(self, suspension: Suspension) -> None:
        super().__init__(suspension.reason)
        self.suspension = suspension


class SubFlow(Protocol):
    """What ``ctx.run_flow`` needs of a flow (a :class:`~queue_core.flows.api.Flow` is one)."""

    name: str

    def new_execution(self, input: Any, execution_id: str, parent: tuple[str, int]) -> NewExecution:
        """The sub-execution of this flow for ``input`` (``parent``: the workflow and step)."""
        ...


@dataclass(eq=False)
class Child:
    """A child of the function (``ctx.run`` / ``ctx.run_flow``): stored (``idx`` known) or
    pending (added to storage with the next suspension)."""

    n: int
    step_id: str
    idx: int | None = None
    flow: bool = False
    build: Callable[[int], NewJob] | None = None
    """Pending job children: the child's job for its step index."""
    start: Callable[[], None] | None = None
    """A sub-execution not started yet: starts it (a fenced storage write)."""


@dataclass(eq=False)
class WorkflowRun:
    """The replay state of one attempt (module docstring)."""

    storage: SupportsWorkflows
    owner: HandleOwner
    """The queue: its serializer, and dead letters decoded for ``ChildFailed``."""
    state: WorkflowState
    ref: LeaseRef
    started_at: int
    """Storage's clock at the body's start, never ahead of it (``ctx.started_at``)."""
    monotonic: Callable[[], float] = time.monotonic
    t0: float | None = None
    """``monotonic()`` when ``started_at`` held (``ctx.started_mono``); ``None``: now."""
    slack_ms: int = 0
    """How far ``started_at`` may be ahead of storage's clock (``ctx.started_slack_ms``)."""
    used: set[str] = field(default_factory=set)
    counters: dict[str, int] = field(default_factory=dict)
    pending: list[Child] = field(default_factory=list)
    memos: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.t0 is None:
            self.t0 = self.monotonic()
        self.memos = {k: m.value for k, m in self.state.memos.items()}

    @property
    def serializer(self) -> Serializer:
        return self.owner.serializer

    @property
    def execution_id(self) -> str:
        return self.state.execution.id

    def now(self, *, up: bool = False) -> int:
        """Epoch ms by storage's clock (module docstring), rounded down -- or ``up``: the
        base of a time to come, so that a sleep or a timeout is never a fraction of a
        millisecond short (SPEC §4, §12: never early)."""
        assert self.t0 is not None  # set by __post_init__
        elapsed = (self.monotonic() - self.t0) * 1000
        return self.started_at + (math.ceil(elapsed) if up else int(elapsed))

    def _next(self, family: str) -> int:
        n = self.counters.get(family, 0)
        self.counters[family] = n + 1
        return n

    # ------------------------------------------------------------------ steps

    def step_key(self, step_id: object) -> str:
        """The memo key of ``ctx.step(step_id)``; refuses a bad or reused id."""
        if not isinstance(step_id, str) or not step_id or len(step_id) > _MAX_STEP_ID:
            raise ConfigError(
                f"ctx.step: invalid step id {step_id!r} — expected a non-empty string of at "
                f"most {_MAX_STEP_ID} characters",
                code="invalid_option",
                field="step_id",
                value=step_id,
            )
        if step_id in self.used:
            raise ConfigError(
                f"ctx.step: step id {step_id!r} is used twice in workflow execution "
                f"{self.execution_id} — each step needs its own id (add the item's key to "
                "the id in a loop, e.g. f'mail-{address}')",
                code="duplicate_step",
                field="step_id",
                value=step_id,
            )
        self.used.add(step_id)
        return f"s:{step_id}"

    def remembered(self, key: str) -> tuple[bool, Any]:
        """``(True, value)`` when memo ``key`` holds a result, else ``(False, None)``."""
        data = self.memos.get(key)
        if data is None:
            return False, None
        return True, self.serializer.loads_result(data)

    def keep(self, key: str, value: Any) -> Any:
        """Store ``value`` as memo ``key`` (fenced by the attempt's lease); the value as it
        comes back from the serializer, as a replay will return it."""
        data = self.serializer.dumps_result(value)
        if isinstance(self.storage, SupportsResultLimit):
            limit = self.storage.max_result_bytes()
            if len(data) > limit:  # as the worker refuses a result: before any write
                raise SerializationError(
                    f"ctx.step result of {len(data)} bytes is larger than this storage keeps"
                    f" ({limit} bytes); return a smaller value (e.g. a reference to where the"
                    " data is kept)"
                )
        with own_storage_call():
            self.storage.put_memo(self.ref, self.execution_id, key, data)
        self.memos[key] = data
        return self.serializer.loads_result(data)

    # ------------------------------------------------------------------ sleeps and events

    def sleep_until(self, wake_ms: int | None, duration_ms: int | None) -> None:
        """Return when the n-th sleep is over, else suspend until its wake time."""
        key = f"t:{self._next('t')}"
        stored = self.memos.get(key)
        memos: tuple[MemoPut, ...] = ()
        if stored is not None:
            wake = int(json.loads(stored))
        else:
            wake = wake_ms if wake_ms is not None else self.now(up=True) + (duration_ms or 0)
            memos = (MemoPut(key, str(wake).encode()),)
        if wake <= self.now():
            return
        self.suspend(Suspension(ready_at=wake, memos=memos, reason="sleep"))

    def wait_for_event(self, name: str, key: str | None, timeout_ms: int | None) -> Any:
        """The data of the event delivered to the n-th wait, else suspend (or time out)."""
        n = self._next("e")
        found, value = self.remembered(f"d:{n}")
        if found:
            return value
        meta_key = f"e:{n}"
        stored = self.memos.get(meta_key)
        memos: tuple[MemoPut, ...] = ()
        if stored is not None:
            meta = json.loads(stored)
            since, until = int(meta["since"]), meta["until"]
            if until is not None and self.now() >= until:
                raise EventTimeout(
                    f"no event {name!r}" + ("" if key is None else f" with key {key!r}")
                    + f" came within the wait's timeout (execution {self.execution_id})",
                    name=name,
                    key=key,
                )  # fmt: skip
        else:
            since = self.now() - self.slack_ms  # an event stamped since then counts
            until = None if timeout_ms is None else self.now(up=True) + timeout_ms
            meta = {"name": name, "key": key, "since": since, "until": until}
            memos = (MemoPut(meta_key, json.dumps(meta, separators=(",", ":")).encode()),)
        wait = EventWait(memo_key=f"d:{n}", name=name, key=key, since=since, until=until)
        self.suspend(Suspension(ready_at=until, memos=memos, wait=wait, reason="event"))

    # ------------------------------------------------------------------ children

    def run(self, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Child:
        """The n-th child: stored already, or pending until the next suspension."""
        if not hasattr(task, "_make") or getattr(task.func, "__durable__", False):
            raise ConfigError(
                f"ctx.run: {task!r} is not a task — expected what @queue.task returns "
                "(a workflow runs as a child with ctx.run_flow of a flow, not ctx.run)",
                code="invalid_option",
                field="task",
                value=repr(task),
            )
        n = self._next("c")
        stored = self._stored_child(n, f"{task.name}#{n}")
        if stored is not None:
            return stored
        step_id = self._new_child_id(f"{task.name}#{n}")
        task.check_arguments(args, kwargs, "ctx.run")
        self.serializer.dumps_payload(args, kwargs)  # refused here, not at the suspension
        eid, deadline = self.execution_id, self.state.execution.deadline_at

        def build(idx: int) -> NewJob:
            job = task._make(  # the task's own options, as .delay() would give them
                args, kwargs, task._template, None, task.policy, job_id=step_job_id(eid, idx)
            )
            return dataclasses.replace(
                job, execution_id=eid, step_id=step_id, flow_deadline_at=deadline
            )

        child = Child(n, step_id, build=build)
        self.pending.append(child)
        return child

    def run_flow(self, flow: SubFlow, input: Any) -> Child:
        """The n-th child as a sub-execution: stored already, or started (a fenced write,
        :meth:`start_flows`) when the function first waits for it."""
        if not callable(getattr(flow, "new_execution", None)):
            raise ConfigError(
                f"ctx.run_flow: {flow!r} is not a flow — expected what queue.flow(...) or "
                "queue.load_flow(...) returns",
                code="invalid_option",
                field="flow",
                value=repr(flow),
            )
        n = self._next("c")
        stored = self._stored_child(n, f"{flow.name}#{n}")
        if stored is not None:
            return stored
        step_id = self._new_child_id(f"{flow.name}#{n}")
        child = Child(n, step_id, flow=True)

        def start() -> None:
            idx = len(self.state.steps)
            eid = self.execution_id
            with own_storage_call():
                new = controlled(
                    self.storage,
                    flow.new_execution(input, sub_execution_id(eid, idx), (eid, idx)),
                )
                state = self.storage.start_child_execution(self.ref, new, step_id, f"c:{n}")
            self.state.steps.append(_step_record(eid, idx, step_id, state))
            self.memos[f"c:{n}"] = json.dumps({"idx": idx, "flow": True}).encode()
            child.idx, child.start = idx, None

        child.start = start
        return child

    def start_flows(self, children: Sequence[Child]) -> None:
        """Start the sub-executions among ``children`` not started yet (storage writes)."""
        for child in children:
            if child.start is not None:
                child.start()

    def gather(self, children: Sequence[Child]) -> list[Any]:
        """Every child's result, in order, once all have finished (else suspend until
        they have); the first failure in order is raised after all finished."""
        self.start_flows(children)
        if not self.finished(children):
            self.wait_children(children)
        return self.values(children)

    def values(self, children: Sequence[Child]) -> list[Any]:
        """The results of finished ``children`` (reads storage for failures and flows)."""
        out: list[Any] = []
        failure: Exception | None = None
        for child in children:
            try:
                out.append(self.child_value(child))
            except (ChildFailed, ExecutionFailed, JobCancelled, JobSkipped) as exc:
                failure = failure or exc
                out.append(None)
        if failure is not None:
            raise failure
        return out

    def _new_child_id(self, base: str) -> str:
        """The step id of a new child: ``base`` (``<task>#<n>``), or ``base.1``, ``base.2``
        ... when a replay runs child ``n`` again while its earlier step stays in the
        execution's history (step ids are unique in an execution: storage finds a step
        by its id)."""
        taken = {s.step_id for s in self.state.steps} | {c.step_id for c in self.pending}
        step_id, k = base, 0
        while step_id in taken:
            k += 1
            step_id = f"{base}.{k}"
        return step_id

    def _stored_child(self, n: int, base: str) -> Child | None:
        data = self.memos.get(f"c:{n}")
        if data is None:
            return None
        value = json.loads(data)
        idx = int(value["idx"])
        found = self.state.steps[idx].step_id if idx < len(self.state.steps) else None
        step_id = base
        if found is not None and found.startswith(base + ".") and found[len(base) + 1 :].isdigit():
            step_id = found  # the same child, run again by a replay (:meth:`_new_child_id`)
        if found != step_id:
            raise ConfigError(
                f"workflow execution {self.execution_id} replayed differently: its child "
                f"#{n} was {found!r} and is now {step_id!r} — everything between ctx calls "
                "must be deterministic (see the determinism rule of the workflows guide)",
                code="nondeterministic_workflow",
                field="ctx.run",
                value=step_id,
            )
        return Child(n, step_id, idx, flow=bool(value.get("flow")))

    def finished(self, children: Sequence[Child]) -> bool:
        """Whether every child is stored and has finished."""
        return all(c.idx is not None and self._step_state(c).finished for c in children)

    def _step_state(self, child: Child) -> StepState:
        assert child.idx is not None
        job = self.state.jobs.get(child.idx)
        if job is not None and not child.flow:
            return StepState(job.state.value)
        return self.state.steps[child.idx].state

    def wait_children(self, children: Sequence[Child]) -> None:
        """Suspend until every one of ``children`` has finished (pending ones are added)."""
        self.suspend(Suspension(ready_at=None, reason="children"), children)

    def suspend(self, suspension: Suspension, awaited: Sequence[Child] = ()) -> None:
        """Raise :class:`Suspend` with ``suspension`` plus the pending children (their
        steps and ``c:<n>`` memos) and the awaited children's indexes."""
        base = len(self.state.steps)
        news, memos = [], list(suspension.memos)
        for k, child in enumerate(self.pending):
            child.idx = base + k
            assert child.build is not None
            news.append(NewChild(child.idx, child.step_id, child.build(child.idx)))
            memos.append(MemoPut(f"c:{child.n}", json.dumps({"idx": child.idx}).encode()))
        awaiting = tuple(dict.fromkeys(c.idx for c in awaited if c.idx is not None))
        raise Suspend(
            Suspension(
                ready_at=suspension.ready_at,
                memos=tuple(memos),
                children=tuple(news),
                awaiting=awaiting or suspension.awaiting,
                wait=suspension.wait,
                reason=suspension.reason,
            )
        )

    def child_value(self, child: Child) -> Any:
        """A finished child's result, or its failure raised (``ChildFailed`` & co.)."""
        assert child.idx is not None
        if child.flow:
            sub = sub_execution_id(self.execution_id, child.idx)
            with own_storage_call():
                record = self.storage.get_execution(sub)
                assert record is not None, f"sub-execution {sub} is gone"
                return execution_value(self.owner.storage(), self.serializer.loads_result, record)
        job = self.state.jobs[child.idx]
        if job.state is JobState.SUCCEEDED:
            return None if job.result is None else self.serializer.loads_result(job.result)
        if job.state is JobState.DEAD:
            dead = None if job.dead_id is None else self.owner.dead_letter(job.dead_id)
            raise ChildFailed(
                f"child {child.step_id} (job {job.id}) is dead: {job.reason}",
                job_id=job.id,
                dead=dead,
            )
        if job.state is JobState.SKIPPED:
            raise JobSkipped(f"child {child.step_id} (job {job.id}) was skipped", job_id=job.id)
        raise JobCancelled(
            f"child {child.step_id} (job {job.id}) ended {job.state.value}", job_id=job.id
        )

    def leftover(self) -> Suspension | None:
        """At the function's end: a suspension that stores the children it started but
        never waited for (they run; the function's end is recorded on its next run)."""
        if not self.pending:
            return None
        try:
            self.suspend(Suspension(ready_at=self.now(), reason="children"))
        except Suspend as stop:
            return stop.suspension
        return None  # pragma: no cover - suspend always raises


def _step_record(execution_id: str, idx: int, step_id: str, state: ExecutionState) -> StepRecord:
    return StepRecord(
        execution_id=execution_id,
        idx=idx,
        step_id=step_id,
        state=sub_step_state(state),
        reason=None,
        job_id=None,
    )


def execution_value(
    storage: Storage, loads: Callable[[bytes], Any], record: ExecutionRecord
) -> Any:
    """What ``ExecutionHandle.result()`` returns for a finished execution ``record``: a
    workflow's function result, a flow's ``{step id: result}``; raises
    :class:`~queue_core.records.errors.ExecutionFailed` unless it succeeded."""
    if record.state is not ExecutionState.SUCCEEDED:
        raise ExecutionFailed(
            record.state, record.reason, record.failed_step, execution_id=record.id
        )
    assert isinstance(storage, SupportsFlows)
    steps = storage.list_steps(record.id)
    if record.kind == "workflow":
        job = storage.get_job(steps[0].job_id) if steps and steps[0].job_id else None
        return loads(job.result) if job is not None and job.result is not None else None
    out: dict[str, Any] = {}
    for s in steps:
        job = storage.get_job(s.job_id) if s.job_id else None
        ok = job is not None and job.state is JobState.SUCCEEDED and job.result is not None
        out[s.step_id] = loads(job.result) if ok else None  # type: ignore[union-attr,arg-type]
    return out


def retrying(policy: RetryPolicy, attempt: int, exc: Exception) -> float | None:
    """The pause before trying a ``ctx.step(..., retry=policy)`` again after ``attempt``
    failed with ``exc`` (seconds), or ``None`` when it is not tried again: no attempt
    left, or not retryable (:func:`~queue_core.rules.classify` with the policy's
    ``non_retryable``)."""
    if attempt >= policy.max_attempts or not classify(exc, non_retryable=policy.non_retryable):
        return None
    return policy.delay(attempt, random.random)

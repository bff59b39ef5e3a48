"""Flows in storage: the :class:`SupportsFlows` ability and the records it exchanges.

A flow execution is a record; each of its steps is a step record, and a step that is
released gets an ordinary job (:class:`~queue_core.records.jobs.NewJob` with ``execution_id``
and ``step_id``), claimed, leased, retried and reaped like any job. Every change to an
execution is judged by :mod:`queue_core.rules.flows.decide` and applied by storage atomically
with the event that caused it (design: ``docs/design/flows-storage.md``).

The core builds everything storage needs at :meth:`SupportsFlows.start_execution`: the
spec's JSON and hash, the execution input, and one complete ``NewJob`` per step (merged
options, deterministic id :func:`step_job_id`). Releasing a step copies its job and sets
``flow_deadline_at``; storage computes nothing else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from queue_core.records.errors import ConfigError
from queue_core.records.flows import (
    ExecutionInfo,
    ExecutionReason,
    ExecutionState,
    StepState,
)
from queue_core.records.jobs import NewJob, dt_from_ms
from queue_core.rules.flows.decide import ExecutionView, StepView
from queue_core.rules.flows.spec import ConcurrencySpec, FlowSpec

__all__ = [
    "ExecutionRecord",
    "NewExecution",
    "StepInputs",
    "StepRecord",
    "spec_hash",
    "step_job_id",
    "step_of_job",
]


def step_job_id(execution_id: str, idx: int) -> str:
    """The id of step ``idx``'s job (index in definition order): ``"<execution>.<idx>"``.

    Deterministic, so releasing a step twice is idempotent in every storage.
    """
    return f"{execution_id}.{idx}"


def step_of_job(job_id: str) -> tuple[str, int] | None:
    """The execution and step index a step job's id names (:func:`step_job_id`'s
    inverse), or ``None`` when ``job_id`` is not of that form. A hint only: a plain job
    may be given an id of the same form."""
    eid, dot, idx = job_id.rpartition(".")
    if not dot or not eid or not idx.isdigit():
        return None
    return eid, int(idx)


def spec_hash(spec_json: str) -> str:
    """The content address of a spec: sha256 hex of :meth:`FlowSpec.to_json`."""
    return hashlib.sha256(spec_json.encode("utf-8")).hexdigest()


def _bad(name: str, value: object, expected: str) -> ConfigError:
    return ConfigError(
        f"NewExecution.{name}: invalid value {value!r} — expected {expected}",
        code="invalid_option",
        field=name,
        value=value,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class NewExecution:
    """An execution to start: what :meth:`SupportsFlows.start_execution` stores.

    Build it with :meth:`build`; the constructor checks that ``jobs`` has one job per
    step, in definition order, with the deterministic id and the step's ids.
    """

    id: str
    flow: str
    spec_json: str
    """:meth:`FlowSpec.to_json` of the definition (stored once per ``spec_hash``)."""
    spec_hash: str
    input: bytes
    """The execution input, serialized by the core's serializer."""
    steps: tuple[StepView, ...]
    """Every step (id, dependencies) in definition order, state ``pending``."""
    jobs: tuple[NewJob, ...]
    """The job of each step (same order), released as is with ``flow_deadline_at`` set."""
    max_parallel: int = 0
    timeout_ms: int | None = None
    concurrency: ConcurrencySpec | None = None
    conc_key: str | None = None
    """``flow`` or ``flow:<key value>`` when the flow has concurrency, else ``None``."""
    kind: str = "flow"
    """``"flow"``, or ``"workflow"`` (SPEC §12): the decisions judge it by its kind."""
    parent_id: str | None = None
    """A sub-execution (``ctx.run_flow``): the workflow execution it is a step of."""
    parent_idx: int | None = None
    """A sub-execution: the index of the parent's step that stands for it."""

    def __post_init__(self) -> None:
        if len(self.jobs) != len(self.steps):
            raise _bad("jobs", len(self.jobs), f"one job per step ({len(self.steps)})")
        for idx, (step, job) in enumerate(zip(self.steps, self.jobs, strict=True)):
            want = (step_job_id(self.id, idx), self.id, step.id)
            if (job.id, job.execution_id, job.step_id) != want:
                raise _bad(f"jobs[{idx}]", (job.id, job.execution_id, job.step_id), repr(want))
        if (self.concurrency is None) != (self.conc_key is None):
            raise _bad("conc_key", self.conc_key, "set exactly when concurrency is set")

    @classmethod
    def build(
        cls,
        *,
        id: str,
        spec: FlowSpec,
        input: bytes,
        jobs: Sequence[NewJob],
        conc_key: str | None = None,
        parent: tuple[str, int] | None = None,
    ) -> NewExecution:
        """The execution of ``spec`` with its step ``jobs`` (``conc_key`` defaults to the
        flow's name when it has concurrency; ``parent``: a sub-execution's parent
        execution and step index)."""
        text = spec.to_json()
        if spec.concurrency is not None and conc_key is None:
            conc_key = spec.name
        return cls(
            id=id,
            flow=spec.name,
            spec_json=text,
            spec_hash=spec_hash(text),
            input=input,
            steps=tuple(StepView(s.id, StepState.PENDING, s.depends_on) for s in spec.steps),
            jobs=tuple(jobs),
            max_parallel=spec.max_parallel,
            timeout_ms=spec.timeout_ms,
            concurrency=spec.concurrency,
            conc_key=conc_key if spec.concurrency is not None else None,
            kind=spec.kind,
            parent_id=None if parent is None else parent[0],
            parent_idx=None if parent is None else parent[1],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One step of an execution as stored (``list_steps``)."""

    execution_id: str
    idx: int
    step_id: str
    state: StepState
    reason: str | None
    """The job's reason, ``flow_timeout`` for a step stopped by the deadline, or for
    ``not_run`` the execution's reason."""
    job_id: str | None
    """``None`` while ``pending``."""
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionRecord:
    """One execution as stored (``get_execution`` / ``list_executions``). Times: epoch ms."""

    id: str
    flow: str
    state: ExecutionState
    reason: ExecutionReason | None
    failed_step: str | None
    spec_hash: str
    spec_json: str
    input: bytes
    max_parallel: int
    timeout_ms: int | None
    deadline_at: int | None
    created_at: int
    started_at: int | None
    finished_at: int | None
    conc_key: str | None = None
    kind: str = "flow"
    """``"flow"`` or ``"workflow"`` (as started)."""
    parent_id: str | None = None
    """A sub-execution's parent execution (``NewExecution.parent_id``)."""
    parent_idx: int | None = None
    awaiting: tuple[int, ...] = ()
    """A waiting workflow: the indexes of the steps its function waits for."""

    def spec(self) -> FlowSpec:
        """The stored definition."""
        return FlowSpec.from_json(self.spec_json)

    def info(self) -> ExecutionInfo:
        """The public record ``queue.executions()`` lists."""
        return ExecutionInfo(
            id=self.id,
            flow=self.flow,
            state=self.state,
            reason=self.reason,
            created_at=dt_from_ms(self.created_at),  # type: ignore[arg-type]
            started_at=dt_from_ms(self.started_at),
            finished_at=dt_from_ms(self.finished_at),
        )

    def view(self, steps: Sequence[StepRecord]) -> ExecutionView:
        """The :class:`~queue_core.rules.flows.decide.ExecutionView` of this execution."""
        return ExecutionView(
            state=self.state,
            steps=tuple(StepView(s.step_id, s.state, s.depends_on) for s in steps),
            max_parallel=self.max_parallel,
            timeout_ms=self.timeout_ms,
            deadline_at=self.deadline_at,
            reason=self.reason,
            failed_step=self.failed_step,
            kind=self.kind,
            awaiting=tuple(steps[i].step_id for i in self.awaiting),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StepInputs:
    """What a step's call is built from (``get_step_inputs``)."""

    input: bytes
    """The execution input (serialized)."""
    results: dict[str, bytes | None] = field(default_factory=dict)
    """Serialized result of each dependency, by step id."""

"""Records of the Redis flows layout (``lua/_flow.lua``): reading an execution's fields
and step states, the operations ``flow_apply.lua`` takes for a
:class:`~queue_core.flows.decide.Transition`, and the arguments of a step job."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.redis.scripts import opt
from queue_core.errors import ConfigError
from queue_core.model import NewJob

if TYPE_CHECKING:  # at run time from backends.redis.flow_names, on a first flow operation
    from queue_core.flows.decide import ExecutionView, Transition
    from queue_core.flows.decide_fast import StepIndex
    from queue_core.flows.model import ExecutionState, StepState
    from queue_core.flows.storage import ExecutionRecord, NewExecution

__all__ = [
    "EXEC_FIELDS",
    "Exec",
    "Op",
    "execution_record",
    "index_of",
    "job_args",
    "parse_step",
    "start_fields",
    "start_index",
    "start_plan",
    "step_replay_refused",
    "text",
    "transition_ops",
    "unmet_fields",
]

EXEC_FIELDS = [
    "fl",
    "sh",
    "st",
    "rs",
    "fs",
    "mp",
    "to",
    "dl",
    "ca",
    "sa",
    "fa",
    "ck",
    "cl",
    "cb",
    "v",
    "sp",
]
Op = list[Any]


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _i(value: bytes | None) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class Exec:
    """One execution as read (fields of ``P:x:<id>`` and the step states)."""

    id: str
    f: dict[str, bytes | None]
    index: StepIndex
    """The steps (ids, dependencies, dependents) by idx."""
    states: list[tuple[StepState, bool, str | None]]
    """(state, released, reason) by idx."""

    @property
    def steps(self) -> list[tuple[str, tuple[str, ...]]]:
        """(step id, dependencies) by idx."""
        return list(zip(self.index.ids, self.index.depends_on, strict=True))

    @property
    def version(self) -> str:
        return text(self.f["v"]) or "0"

    @property
    def state(self) -> ExecutionState:
        from backends.redis.flow_names import ExecutionState

        return ExecutionState(text(self.f["st"]))

    @property
    def conc_key(self) -> str | None:
        return text(self.f["ck"])

    def view(self) -> ExecutionView:
        from backends.redis.flow_names import ExecutionReason, ExecutionView, StepView

        rs = text(self.f["rs"])
        return ExecutionView(
            state=self.state,
            steps=tuple(
                StepView(sid, st[0], deps)
                for (sid, deps), st in zip(self.steps, self.states, strict=True)
            ),
            max_parallel=int(self.f["mp"] or 0),
            timeout_ms=_i(self.f["to"]),
            deadline_at=_i(self.f["dl"]),
            reason=None if rs is None else ExecutionReason(rs),
            failed_step=text(self.f["fs"]),
        )


_PARSED: dict[bytes, tuple[StepState, bool, str | None]] = {}
_INDEXES: dict[bytes, StepIndex] = {}


def index_of(sp: bytes | None) -> StepIndex:
    """The :class:`StepIndex` of an execution's ``sp`` field (JSON ``[[id, [deps]], ...]``),
    built once per distinct value (the steps of an execution never change)."""
    from backends.redis.flow_names import step_index

    raw = sp or b"[]"
    got = _INDEXES.get(raw)
    if got is None:
        got = step_index([(sid, tuple(deps)) for sid, deps in json.loads(raw)])
        if len(_INDEXES) >= 64:
            _INDEXES.pop(next(iter(_INDEXES)))
        _INDEXES[raw] = got
    return got


def parse_step(raw: bytes) -> tuple[StepState, bool, str | None]:
    """``state|released|reason`` (few distinct values: parsed once each)."""
    from backends.redis.flow_names import StepState

    got = _PARSED.get(raw)
    if got is None:
        state, released, reason = raw.decode().split("|", 2)
        got = (StepState(state), released == "1", reason or None)
        if len(_PARSED) < 4096:
            _PARSED[raw] = got
    return got


def transition_ops(x: Exec, t: Transition, reasons: dict[str, str] | None = None) -> list[Op]:
    """The operations of ``flow_apply.lua`` that apply ``t`` to ``x`` (design §3
    order: the event's step, execution fields, time_out, not_run, cancel, release)."""
    from backends.redis.flow_names import S

    ix = x.index
    eid = x.id
    ops: list[Op] = []
    for sid, st in t.ended:
        i = ix.pos[sid]
        op: Op = ["step", eid, str(i), st.value, "1", (reasons or {}).get(sid, "")]
        if st is S.SUCCEEDED:  # its dependents' unmet counters (P:xu) go down by one
            op.append([str(d) for d in ix.dependents[i]])
        ops.append(op)
    sets: list[str] = []
    dels: list[str] = []
    for name, value in (
        ("st", t.state.value),
        ("rs", None if t.reason is None else t.reason.value),
        ("fs", t.failed_step),
        ("dl", t.deadline_at),
    ):
        if value is None:
            dels.append(name)
        else:
            sets += (name, str(value))
    ops.append(["exec", eid, sets, dels])
    deadline = "" if t.deadline_at is None else str(t.deadline_at)  # a JSON op: text
    if t.started:
        ops.append(["started", eid, deadline])
    if t.finished:
        ops.append(["finished", eid, x.conc_key or ""])
    pos = ix.pos
    ops += [["time_out", eid, str(pos[s])] for s in t.time_out]
    reason = "" if t.not_run_reason is None else t.not_run_reason.value
    ops += [["not_run", eid, str(pos[s]), reason] for s in t.not_run]
    ops += [["cancel", eid, str(pos[s])] for s in t.cancel]
    ops += [["release", eid, str(pos[s]), deadline] for s in t.release]
    return ops


def execution_record(eid: str, f: dict[str, bytes | None], spec: bytes | None) -> ExecutionRecord:
    from backends.redis.flow_names import ExecutionReason, ExecutionRecord, ExecutionState

    rs = text(f["rs"])
    return ExecutionRecord(
        id=eid,
        flow=text(f["fl"]) or "",
        state=ExecutionState(text(f["st"])),
        reason=None if rs is None else ExecutionReason(rs),
        failed_step=text(f["fs"]),
        spec_hash=text(f["sh"]) or "",
        spec_json=text(spec) or "",
        input=f["in"] or b"",
        max_parallel=int(f["mp"] or 0),
        timeout_ms=_i(f["to"]),
        deadline_at=_i(f["dl"]),
        created_at=int(f["ca"] or 0),
        started_at=_i(f["sa"]),
        finished_at=_i(f["fa"]),
        conc_key=text(f["ck"]),
    )


def job_args(j: NewJob) -> list[Any]:
    """The 16 arguments of one job for ``flow_start.lua``; ``enqueue.lua`` takes them too,
    then ``replay_of``."""
    return [
        j.id,
        j.task_name,
        j.queue,
        j.payload,
        j.priority,
        opt(j.run_at),
        j.delay_ms,
        j.max_attempts,
        j.lost_delay_ms,
        opt(j.timeout_ms),
        opt(j.heartbeat_ms),
        opt(j.schedule_to_start_ms),
        opt(j.concurrency_key),
        opt(j.concurrency_limit),
        "1" if j.concurrency_skip else "0",
        opt(j.options),
    ]


def start_fields(new: NewExecution) -> list[str]:
    """The fields of ``P:x:<id>`` that never change (flat field/value list)."""
    steps = [[s.id, list(s.depends_on)] for s in new.steps]
    fields = ["fl", new.flow, "sh", new.spec_hash, "mp", str(new.max_parallel)]
    fields += ("sp", json.dumps(steps))
    if new.timeout_ms is not None:
        fields += ("to", str(new.timeout_ms))
    if new.conc_key is not None and new.concurrency is not None:
        c = new.concurrency
        fields += ("ck", new.conc_key, "cl", str(c.limit), "cb", c.behavior)
    return fields


def start_plan(
    new: NewExecution, admitted: ExecutionState, now: int
) -> tuple[list[str], list[Op], ExecutionState, bool]:
    """What ``flow_start.lua`` writes for an execution admitted ``admitted``: the state
    fields, the operations (``decide.start`` when running; a skipped one is stored
    finished, its steps ``not_run``), the state afterwards and whether it finished."""
    from backends.redis.flow_names import ExecutionReason, ExecutionState, ExecutionView, S, decide

    if admitted is ExecutionState.SKIPPED:
        reason = ExecutionReason.CONCURRENCY_LIMIT.value
        ops: list[Op] = [
            ["step", new.id, str(i), S.NOT_RUN.value, "0", reason] for i in range(len(new.steps))
        ]
        ops.append(["finished", new.id, ""])
        return ["st", admitted.value, "rs", reason], ops, admitted, False  # never active
    head = ["st", ExecutionState.QUEUED.value]
    if admitted is not ExecutionState.RUNNING:
        return head, [], admitted, False
    view = ExecutionView(
        state=ExecutionState.QUEUED,
        steps=new.steps,
        max_parallel=new.max_parallel,
        timeout_ms=new.timeout_ms,
    )
    ck = None if new.conc_key is None else new.conc_key.encode()
    shell = Exec(new.id, {"ck": ck}, start_index(new), [])
    t = decide.start(view, now)
    return head, transition_ops(shell, t), t.state, t.finished


def start_index(new: NewExecution) -> StepIndex:
    """The :class:`StepIndex` of a new execution's steps."""
    from backends.redis.flow_names import step_index

    return step_index([(s.id, s.depends_on) for s in new.steps])


def unmet_fields(index: StepIndex) -> list[str]:
    """``P:xu:<e>`` at start: idx/unmet pairs (flat) of the steps with dependencies."""
    out: list[str] = []
    for i, n in enumerate(index.unmet):
        if n:
            out += (str(i), str(n))
    return out


def step_replay_refused(dead_id: str) -> ConfigError:
    """``retry_dead`` of a flow step's dead-letter entry (design §1): refused."""
    return ConfigError(
        f"dead-letter entry {dead_id!r} is a flow step's: replay the execution instead "
        "(a lone step would run with no execution to report to)",
        code="invalid_option",
        field="dead_id",
        value=dead_id,
    )

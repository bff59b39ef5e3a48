"""Flow execution items of the SQS backend <-> flow records and plan operations. Pure: no
requests, no clock (the flows part, :mod:`backends.sqs.flows`, does those).

The layout (``P`` is the key prefix ``"<prefix>#"``; ``docs/backends/sqs.md`` has every
attribute): execution ``P X#<id>``/``X`` with ``sp`` (steps and dependencies, JSON; a
declared flow's are its spec's, ``P FS#<hash>``/``FS``, not repeated in each execution
item, which DynamoDB bills by its whole size at every write), ``ss`` (one line
``state|released|reason`` per step), ``r`` (claims not yet folded: idx -> attempt) and
``td`` (job operations left, :func:`dump_op`), the three texts compressed when long
(:func:`pack`); in its partition the step-end events ``E#<idx>#<attempt>#a|q``, results
``O#<idx>`` and the step jobs kept until released, ``JB#<part>`` (:func:`zjson` of
:data:`PART` job items); concurrency key ``P XK#<key>``/``XK`` with ``a`` (id ->
``state|created_at``, :func:`slots`). A workflow's items (memos, children's jobs, event
waits, events) are :mod:`backends.sqs.wf_items`'.
"""

from __future__ import annotations

import base64
import functools
import json
import zlib
from collections.abc import Iterable
from typing import Any

from backends.sqs.codec import Item
from queue_core.records.errors import StorageError
from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import JobState, Outcome
from queue_core.rules.flows import decide, plan
from queue_core.rules.flows.decide import ExecutionView
from queue_core.storage.flows import ExecutionRecord, NewExecution, StepRecord
from queue_core.storage.flows import step_job_id as job_of

__all__ = [
    "PART",
    "Cell",
    "Exec",
    "JobOp",
    "Steps",
    "cells_text",
    "dump_op",
    "exec_item",
    "exec_record",
    "fit",
    "fresh_release",
    "job_when",
    "pack",
    "read_steps",
    "slots",
    "steps_text",
    "stored_at",
    "unpack",
    "unzjson",
    "zjson",
]

_E, _S = ExecutionState, StepState
PART = 200
"""Steps per ``JB#`` item (the step jobs, stored at start until released)."""

Actions = list[dict[str, Any]]
Cell = tuple[StepState, bool, str | None]
"""A step as stored: its state, whether its job was released, its reason."""
JobOp = plan.EndJob | plan.RequestCancel | plan.Release | plan.SetReady | plan.Wake
_OLD_TD: dict[str, list[Any]] = {
    "nr": ["queued", "cancelled", "not_run", None],
    "to": ["running", "timed_out", "flow_timeout", "timed_out"],
}
"""``td`` rows ``[kind, idx]`` of the version before the plan (``rel``, ``cx`` as now)."""
_RECORD = {"flow": "fl", "failed_step": "fs", "spec_hash": "sh", "timeout_ms": "to"}
_RECORD |= {"deadline_at": "dl", "created_at": "ca", "started_at": "sa", "finished_at": "fa"}


def dump_op(op: JobOp) -> list[Any]:
    """A job operation as a ``td`` row (:meth:`Exec.todo` reads it back)."""
    if isinstance(op, plan.Release):
        return ["rel", op.idx, op.deadline_at]
    if isinstance(op, plan.RequestCancel):
        return ["cx", op.idx]
    if isinstance(op, plan.SetReady):
        return ["rdy", op.idx, op.at]
    if isinstance(op, plan.Wake):
        return ["wk", op.idx]
    oc = None if op.outcome is None else op.outcome.value
    return ["end", op.idx, op.when.value, op.state.value, op.reason, oc]


PACK_FROM = 1024
"""``sp``, ``ss`` and ``td`` texts of at least this many bytes are stored zlib-compressed (a
binary attribute): an execution item is written again by every batch of its step ends
and every chunk of its job writes, and DynamoDB bills a write by the whole item's size,
in the table and in each index that holds it."""


def pack(text: str) -> str | bytes:
    """An ``sp``, ``ss`` or ``td`` text as stored: as is when short, else compressed."""
    raw = text.encode()
    return zlib.compress(raw, 1) if len(raw) >= PACK_FROM else text


def unpack(value: Any) -> str:
    """An ``sp``, ``ss`` or ``td`` attribute's text (:func:`pack`; a text of an earlier
    version as is)."""
    if isinstance(value, (bytes, bytearray)):
        return zlib.decompress(value).decode()
    return str(value)


def _b64(value: bytes) -> dict[str, str]:
    return {"$b": base64.b64encode(value).decode()}


def zjson(items: list[Item]) -> bytes:
    """Job items as compressed JSON (bytes as ``{"$b": base64}``, read by :func:`unzjson`)."""
    return zlib.compress(json.dumps(items, default=_b64).encode())


def _unb64(obj: dict[str, Any]) -> Any:
    return base64.b64decode(obj["$b"]) if "$b" in obj else obj


def unzjson(blob: bytes) -> list[Item]:
    """The job items of a :func:`zjson` blob."""
    items: list[Item] = json.loads(zlib.decompress(blob), object_hook=_unb64)
    return items


Steps = list[tuple[str, tuple[str, ...]]]
"""A flow's steps as stored (``sp``): each step's id and the ids it depends on."""


def steps_text(new: NewExecution) -> str:
    """The ``sp`` text of ``new``'s steps (JSON ``[[id, [dependency, ...]], ...]``)."""
    return json.dumps([[s.id, list(s.depends_on)] for s in new.steps])


def read_steps(value: Any) -> Steps:
    """The steps of an ``sp`` attribute (:func:`pack` of :func:`steps_text`)."""
    return [(sid, tuple(deps)) for sid, deps in json.loads(unpack(value))]


class Exec:
    """One execution item as read: its steps, their cells, the claims not yet folded.

    A declared flow's steps are its spec's, read once per spec (its ``FS#`` item) and
    passed as ``steps``; an execution item holds its own ``sp`` when its steps grow at run
    time (a workflow) or when an earlier version wrote it."""

    def __init__(self, item: Item, steps: Steps | None = None) -> None:
        self.item, self.id, self.state = item, str(item["id"]), ExecutionState(item["st"])
        if "sp" in item:
            self.steps = read_steps(item["sp"])
        elif steps is not None:
            self.steps = list(steps)
        else:
            raise StorageError(
                f"execution {self.id}: the steps of spec {item.get('sh')!r} were not read"
            )
        self.cells_text = unpack(item["ss"])
        """``ss`` as read (a write that leaves it as it was does not write it)."""
        self.cells: list[Cell] = []
        for line in self.cells_text.split("\n"):
            st, released, why = line.split("|", 2)
            self.cells.append((StepState(st), released == "1", why or None))
        self.claims = {int(k): int(n) for k, n in (item.get("r") or {}).items()}
        self.kind = str(item.get("k") or "flow")
        self.memos: dict[str, list[int]] = json.loads(item.get("mk") or "{}")
        """A workflow's memos: key -> [number, write number, at] (its ``M#`` items)."""
        self.waits: dict[str, str] = json.loads(item.get("wt") or "{}")
        """A workflow's event waits: memo key -> event name (its ``W#`` items)."""

    @functools.cached_property
    def pos(self) -> dict[str, int]:
        """Step id -> its index in :attr:`steps`."""
        return {sid: i for i, (sid, _) in enumerate(self.steps)}

    def todo(self) -> list[JobOp]:
        """The job operations left to apply (``td``)."""
        out: list[JobOp] = []
        for kind, i, *rest in json.loads(unpack(self.item.get("td") or "[]")):
            sid = self.steps[i][0]
            if kind == "rel":
                out.append(plan.Release(sid, i, rest[0] if rest else self.item.get("dl")))
            elif kind == "cx":
                out.append(plan.RequestCancel(sid, i))
            elif kind == "rdy":
                out.append(plan.SetReady(sid, i, rest[0]))
            elif kind == "wk":
                out.append(plan.Wake(sid, i))
            else:
                when, state, why, oc = rest or _OLD_TD[kind]
                outcome = None if oc is None else Outcome(oc)
                out.append(plan.EndJob(sid, i, JobState(when), JobState(state), why, outcome))
        return out

    def record(self, spec_json: str = "") -> ExecutionRecord:
        return exec_record(self.item, spec_json)

    def step_records(self, claimed: bool = True) -> list[StepRecord]:
        """The steps as stored; with ``claimed``, a claim not yet folded shows ``running``."""
        claims = self.claims if claimed else {}
        return [
            StepRecord(
                execution_id=self.id,
                idx=i,
                step_id=sid,
                state=_S.RUNNING if i in claims else st,
                reason=why,
                job_id=job_of(self.id, i) if released or i in claims else None,
                depends_on=deps,
            )
            for i, ((sid, deps), (st, released, why)) in enumerate(
                zip(self.steps, self.cells, strict=True)
            )
        ]

    def view(self) -> ExecutionView:
        return self.record().view(self.step_records(claimed=False))


def exec_record(item: Item, spec_json: str = "") -> ExecutionRecord:
    """The record of an execution item (its steps are not needed: a listing reads none)."""
    get = item.get
    same: dict[str, Any] = {field: get(name) for field, name in _RECORD.items()}
    return ExecutionRecord(
        id=str(item["id"]),
        state=ExecutionState(item["st"]),
        reason=None if get("rsn") is None else ExecutionReason(get("rsn")),
        spec_json=spec_json,
        input=bytes(get("in", b"")),
        max_parallel=int(get("mp", 0)),
        conc_key=get("ck"),
        kind=str(get("k") or "flow"),
        parent_id=get("pi"),
        parent_idx=get("px"),
        awaiting=tuple(get("aw") or ()),
        **same,
    )


def stored_at(x: Exec, idx: int) -> tuple[int, str, int]:
    """Where step ``idx``'s job is kept until released: (cache key, sort key, position)
    -- a declared step's in its ``JB#`` part, a workflow child's in its ``JC#`` item."""
    if x.kind == "workflow" and idx > 0:
        return -1 - idx, f"JC#{idx:06d}", 0
    return idx // PART, f"JB#{idx // PART:04d}", idx % PART


def fresh_release(x: Exec, op: JobOp) -> bool:
    """A release of a step never released before: its job does not exist yet."""
    return isinstance(op, plan.Release) and (op.idx >= len(x.cells) or not x.cells[op.idx][1])


def job_when(op: JobOp) -> JobState:
    """The state of the job a (non-release) job operation applies to."""
    if isinstance(op, plan.EndJob):
        return op.when
    return JobState.RUNNING if isinstance(op, plan.RequestCancel) else JobState.QUEUED


def cells_text(cells: Iterable[Cell]) -> str:
    return "\n".join(f"{st.value}|{int(released)}|{why or ''}" for st, released, why in cells)


def exec_item(p: str, new: NewExecution, seq: int, now: int, own_steps: bool = True) -> Item:
    """The execution item of ``new`` as stored ``queued`` with every step ``pending``; its
    steps (``sp``) only with ``own_steps`` (not for a declared flow: they are its spec's)."""
    item: Item = {"pk": f"{p}X#{new.id}", "sk": "X", "id": new.id, "fl": new.flow, "ap": f"{p}X"}
    item.update(sh=new.spec_hash, st=_E.QUEUED.value, mp=new.max_parallel, to=new.timeout_ms)
    item.update({"in": new.input}, ca=now, seq=seq, v=1, r={})
    if own_steps:
        item["sp"] = pack(steps_text(new))
    item["ss"] = pack(cells_text([(_S.PENDING, False, None)] * len(new.steps)))
    if new.concurrency is not None:
        item.update(ck=new.conc_key, cl=new.concurrency.limit, cb=new.concurrency.behavior)
    if new.kind != "flow":
        item["k"] = new.kind
    if new.parent_id is not None:
        item.update(pi=new.parent_id, px=new.parent_idx)
    return item


def slots(key: Item) -> list[decide.ExecutionSlot]:
    """The executions a concurrency key item counts (its ``a`` map: ``state|created_at``)."""
    cells = [(eid, *cell.split("|")) for eid, cell in (key.get("a") or {}).items()]
    return [decide.ExecutionSlot(eid, ExecutionState(st), int(ca)) for eid, st, ca in cells]


def fit(groups: list[Actions], room: int, fixed: Actions) -> list[int]:
    """Indexes of the write groups that fit beside ``fixed`` in ``room`` items, each item
    at most once in the transaction."""

    def key(action: dict[str, Any]) -> str:
        body = next(iter(action.values()))
        k = body.get("Key") or body["Item"]
        return f"{k['pk']['S']}|{k['sk']['S']}"

    chosen: list[int] = []
    taken = {key(a) for a in fixed}
    for gi, group in enumerate(groups):
        keys = {key(a) for a in group}
        if len(group) <= room and not keys & taken:
            chosen.append(gi)
            room -= len(group)
            taken |= keys
    return chosen

"""DynamoDB items of flow executions (SQS backend) and the pure fold of an advance.

Pure: no requests, no clock. The layout (also in :mod:`backends.sqs.codec`'s legend and
``docs/backends/sqs.md``), ``P`` being the key prefix ``"<prefix>#"``:

* execution ``pk = P X#<id>``, ``sk = X``: ``id``, ``fl`` flow, ``sh`` spec hash, ``st``
  state, ``rsn`` reason, ``fs`` failed step, ``mp`` max_parallel, ``to`` timeout ms,
  ``dl`` deadline, ``ca``/``sa``/``fa`` created/started/finished, ``seq``, ``ck``/``cl``/
  ``cb`` concurrency key, limit, behaviour, ``in`` input, ``sp`` steps JSON
  ``[[id, [deps]], …]``, ``ss`` step states (lines ``state|released|reason``), ``r``
  claims not yet folded (map idx -> attempt), ``td`` job operations still to apply
  (JSON), ``v`` version;
  index keys ``ap = P X`` (listing), ``tp``/``tx`` = ``P XT``/deadline while running
  with a deadline, ``P XF``/finished_at once finished (prune), ``dp``/``dx`` =
  ``P XA``/time while ``td`` is not empty.
* step end event ``pk = P X#<id>``, ``sk = E#<idx>#<attempt>#<a|q>`` (``a``: an attempt
  ended, ``q``: a queued job ended): ``i`` idx, ``n`` attempt, ``st`` the job's new
  state, ``rsn`` its reason, ``dp``/``dx`` = ``P XA``/time (the reaper finds it).
* step result ``pk = P X#<id>``, ``sk = O#<idx>``: ``d`` the succeeded step's result.
* spec ``pk = P FS#<hash>``, ``sk = FS``: ``body`` zlib-compressed spec JSON.
* concurrency key ``pk = P XK#<conc_key>``, ``sk = XK``: ``a`` active executions (map id
  -> ``state|created_at``), ``cl``, ``cb``, ``v``; ``dp``/``dx`` = ``P XP``/time while a
  promotion may be due.
* step jobs not released yet ``pk = P X#<id>``, ``sk = JB#<part>``: ``d`` the job items
  of :data:`PART` steps each (zlib-compressed JSON), written at the start; releasing a
  step puts its job item ``P J#<execution>.<idx>`` from there (no job item before).
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

from backends.sqs.codec import Item
from queue_core.flows import decide
from queue_core.flows.decide import ExecutionView, StepView, Transition
from queue_core.flows.model import ExecutionReason, ExecutionState, StepState
from queue_core.flows.storage import ExecutionRecord, NewExecution, StepRecord, step_job_id
from queue_core.model import Reason

__all__ = [
    "PART",
    "Exec",
    "Fold",
    "blob_jobs",
    "cells_text",
    "event_sk",
    "exec_item",
    "fold",
    "jobs_blob",
    "step_cell",
]

_S = StepState
_E = ExecutionState
PART = 200
"""Steps per ``JB#`` item of step jobs."""


def jobs_blob(items: list[Item]) -> bytes:
    """Job items as one compressed blob (bytes values base64 under ``{"$b": …}``)."""

    def enc(v: Any) -> Any:
        return {"$b": base64.b64encode(v).decode()} if isinstance(v, bytes) else v

    return zlib.compress(json.dumps([{k: enc(v) for k, v in it.items()} for it in items]).encode())


def blob_jobs(blob: bytes) -> list[Item]:
    def dec(v: Any) -> Any:
        return base64.b64decode(v["$b"]) if isinstance(v, dict) and "$b" in v else v

    return [{k: dec(v) for k, v in it.items()} for it in json.loads(zlib.decompress(blob))]


def step_cell(state: StepState, released: bool, reason: str | None) -> str:
    return f"{state.value}|{int(released)}|{reason or ''}"


def cells_text(cells: list[tuple[StepState, bool, str | None]]) -> str:
    """The ``ss`` attribute: one cell per step, a line each (one string, not a list:
    cheaper to store, copy and read)."""
    return "\n".join(step_cell(*c) for c in cells)


def _parse_cell(cell: str) -> tuple[StepState, bool, str | None]:
    state, released, reason = cell.split("|", 2)
    return StepState(state), released == "1", reason or None


def event_sk(idx: int, attempt: int, queued: bool) -> str:
    return f"E#{idx:06d}#{attempt:05d}#{'q' if queued else 'a'}"


@dataclass(frozen=True, slots=True)
class Exec:
    """One execution item as read."""

    item: Item

    @property
    def id(self) -> str:
        return str(self.item["id"])

    @property
    def version(self) -> int:
        return int(self.item["v"])

    @property
    def state(self) -> ExecutionState:
        return ExecutionState(self.item["st"])

    @property
    def steps(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(sid, tuple(deps)) for sid, deps in json.loads(self.item["sp"])]

    @property
    def cells(self) -> list[tuple[StepState, bool, str | None]]:
        return [_parse_cell(c) for c in str(self.item["ss"]).split("\n")]

    @property
    def claims(self) -> dict[int, int]:
        return {int(k): int(n) for k, n in (self.item.get("r") or {}).items()}

    @property
    def todo(self) -> list[list[Any]]:
        return list(json.loads(self.item.get("td") or "[]"))

    def view(self, overlay_claims: bool = False) -> ExecutionView:
        claims = self.claims if overlay_claims else {}
        rs = self.item.get("rsn")
        return ExecutionView(
            state=self.state,
            steps=tuple(
                StepView(sid, _S.RUNNING if i in claims else cell[0], deps)
                for i, ((sid, deps), cell) in enumerate(zip(self.steps, self.cells, strict=True))
            ),
            max_parallel=int(self.item.get("mp", 0)),
            timeout_ms=self.item.get("to"),
            deadline_at=self.item.get("dl"),
            reason=None if rs is None else ExecutionReason(rs),
            failed_step=self.item.get("fs"),
        )

    def record(self, spec_json: str) -> ExecutionRecord:
        rs = self.item.get("rsn")
        return ExecutionRecord(
            id=self.id,
            flow=self.item["fl"],
            state=self.state,
            reason=None if rs is None else ExecutionReason(rs),
            failed_step=self.item.get("fs"),
            spec_hash=self.item["sh"],
            spec_json=spec_json,
            input=bytes(self.item.get("in", b"")),
            max_parallel=int(self.item.get("mp", 0)),
            timeout_ms=self.item.get("to"),
            deadline_at=self.item.get("dl"),
            created_at=self.item["ca"],
            started_at=self.item.get("sa"),
            finished_at=self.item.get("fa"),
            conc_key=self.item.get("ck"),
        )

    def step_records(self) -> list[StepRecord]:
        claims = self.claims
        return [
            StepRecord(
                execution_id=self.id,
                idx=i,
                step_id=sid,
                state=_S.RUNNING if i in claims else st,
                reason=reason,
                job_id=step_job_id(self.id, i) if released or i in claims else None,
                depends_on=deps,
            )
            for i, ((sid, deps), (st, released, reason)) in enumerate(
                zip(self.steps, self.cells, strict=True)
            )
        ]


def exec_item(p: str, new: NewExecution, seq: int, now: int) -> Item:
    """The execution item of ``new`` as stored ``queued`` with every step ``pending``
    (the start's decision is folded over it by the caller)."""
    item: Item = {
        "pk": f"{p}X#{new.id}",
        "sk": "X",
        "id": new.id,
        "fl": new.flow,
        "sh": new.spec_hash,
        "st": _E.QUEUED.value,
        "mp": new.max_parallel,
        "to": new.timeout_ms,
        "ca": now,
        "seq": seq,
        "in": new.input,
        "sp": json.dumps([[s.id, list(s.depends_on)] for s in new.steps]),
        "ss": cells_text([(_S.PENDING, False, None)] * len(new.steps)),
        "r": {},
        "v": 1,
        "ap": f"{p}X",
    }
    if new.conc_key is not None and new.concurrency is not None:
        item.update(ck=new.conc_key, cl=new.concurrency.limit, cb=new.concurrency.behavior)
    return item


@dataclass
class Fold:
    """The result of folding events and a judgement over one execution."""

    view: ExecutionView
    cells: list[tuple[StepState, bool, str | None]]
    changed: bool = False
    started: bool = False
    finished: bool = False
    released: set[int] = field(default_factory=set)
    timed_out: set[int] = field(default_factory=set)
    cancel: set[int] = field(default_factory=set)

    def ops(self, before: list[tuple[StepState, bool, str | None]]) -> list[list[Any]]:
        """Job operations: ``rel`` (enqueue the pending job), ``nr`` (a queued job ends
        ``cancelled``/``not_run``), ``to`` (a running attempt ends ``flow_timeout``),
        ``cx`` (cancel request), from the state before and after the fold."""
        out: list[list[Any]] = []
        for i, (st, _, _) in enumerate(self.cells):
            had_job = before[i][1]
            if i in self.released and st is _S.QUEUED and not had_job:
                out.append(["rel", i])
            elif st is _S.NOT_RUN and had_job and before[i][0] is not _S.NOT_RUN:
                out.append(["nr", i])
            elif i in self.timed_out and had_job:
                out.append(["to", i])
            elif i in self.cancel and st is _S.RUNNING:
                out.append(["cx", i])
        return out

    def apply(self, t: Transition, reasons: dict[str, str | None]) -> None:
        if not t.changes(self.view):
            return
        pos = {s.id: i for i, s in enumerate(self.view.steps)}
        self.changed = True
        self.started = self.started or t.started
        self.finished = self.finished or t.finished
        for sid, st in t.ended:
            old = self.cells[pos[sid]]
            self.cells[pos[sid]] = (st, old[1], reasons.get(sid))
        for sid in t.release:
            self.cells[pos[sid]] = (_S.QUEUED, True, None)
            self.released.add(pos[sid])
        nr = None if t.not_run_reason is None else t.not_run_reason.value
        for sid in t.not_run:
            self.cells[pos[sid]] = (_S.NOT_RUN, self.cells[pos[sid]][1], nr)
        for sid in t.time_out:
            self.cells[pos[sid]] = (_S.TIMED_OUT, True, Reason.FLOW_TIMEOUT.value)
            self.timed_out.add(pos[sid])
        self.cancel.update(pos[s] for s in t.cancel)
        self.view = decide.apply(self.view, t)

    def set_running(self, i: int) -> None:
        st, released, _ = self.cells[i]
        if st.finished:
            return
        self.cells[i] = (_S.RUNNING, True, None)
        steps = list(self.view.steps)
        steps[i] = StepView(steps[i].id, _S.RUNNING, steps[i].depends_on)
        self.view = replace(self.view, steps=tuple(steps))
        self.changed = True


def fold(x: Exec, events: list[Item], now: int, judge: Any = None) -> Fold:
    """Fold the pending claims and step-end events of ``x`` through
    :func:`decide.step_ended` (per step by attempt; steps in definition order), then
    ``judge`` the result (``decide.cancel`` / ``decide.start``) or, without one,
    :func:`decide.advance` (the deadline)."""
    f = Fold(view=x.view(), cells=x.cells)
    claims = x.claims
    last: dict[int, int] = {}
    for ev in events:
        last[int(ev["i"])] = max(last.get(int(ev["i"]), 0), int(ev["n"]))
    for i in claims:
        if i not in last:  # claimed after the last fold, no end since
            f.set_running(i)
    f.changed = f.changed or bool(claims)
    ordered = sorted(events, key=lambda e: (int(e["i"]), int(e["n"]), e["sk"]))
    for k, ev in enumerate(ordered):
        i, sid = int(ev["i"]), x.steps[int(ev["i"])][0]
        f.apply(decide.step_ended(f.view, sid, StepState(ev["st"]), now), {sid: ev.get("rsn")})
        f.changed = True
        end_of_step = k + 1 == len(ordered) or int(ordered[k + 1]["i"]) != i
        if end_of_step and claims.get(i, 0) > last[i]:
            f.set_running(i)
    t = judge(f.view) if judge is not None else decide.advance(f.view, now)
    f.apply(t, {})
    return f

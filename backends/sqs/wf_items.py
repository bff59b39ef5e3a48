"""The execution item's half of the SQS flows interpreter (:func:`exec_sets`), and a
workflow's items and what the workflow plan operations write to them (SPEC §12). Pure:
no requests, no clock -- the flows part's one interpreter
(:meth:`backends.sqs.flows.SQSFlows._commit`) turns them into its writes.

The layout (``P`` is the key prefix ``"<prefix>#"``; ``docs/backends/sqs.md`` has it too):

- execution item ``P X#<id>``/``X`` (:mod:`backends.sqs.flow_items`) gains ``k`` kind
  (``workflow``), ``pi``/``px`` a sub-execution's parent and step index, ``aw`` awaited
  step indexes, ``mk`` memos (JSON ``key -> [number, write number, at]``), ``mq`` the
  last memo number, ``mw`` the last memo write number, ``wt`` event waits (JSON
  ``memo key -> event name``); ``sp``/``ss`` grow with the steps added at run time;
- in the execution's partition: memo values ``M#<write number>`` (``k`` key, ``d``
  value, ``n`` number, ``at``) -- only the write ``mk`` names is the memo, so a value
  written before its execution update (a large suspension) is inert until then; a
  child's job as stored, ``JC#<idx>`` (:func:`~backends.sqs.flow_items.zjson` of its job
  item: the budget a re-run starts from);
- event waits ``P W#<name>``/``<execution id>#<memo key>`` (``x`` execution, ``w`` JSON
  ``[memo key, key, since, until]``);
- events ``P EV#<name>``/``<at, 16 digits>#<uuid>`` (``k`` key, ``d`` data, ``at``;
  ``tp``/``tx`` = ``P EVP``/``at`` for prune) and the event counter ``P EVN#<name>``/``EVN``
  (``n``: ``send_event`` moves it, a suspension's write checks it).

A workflow's step jobs carry ``wf`` (``1``): they stay out of the job prune and the TTL
and go with their execution.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.sqs.blobs import output_fields
from backends.sqs.codec import Item
from backends.sqs.flow_items import Cell, Exec, JobOp, cells_text, pack
from queue_core.records.errors import StorageError
from queue_core.records.flows import ExecutionState
from queue_core.records.jobs import NewJob
from queue_core.records.workflows import EventWait, StoredEvent
from queue_core.rules.flows import plan, workflow
from queue_core.storage.workflows import sub_execution_id

__all__ = ["WfPlan", "event_item", "exec_sets", "stored_event", "wait_of", "waiter_key"]

_WORKFLOW = "workflow"


def waiter_key(p: str, name: str, eid: str, memo_key: str) -> tuple[str, str]:
    """The (pk, sk) of execution ``eid``'s wait ``memo_key`` for event ``name``."""
    return f"{p}W#{name}", f"{eid}#{memo_key}"


def wait_of(name: str, item: Item) -> EventWait:
    """The :class:`EventWait` a waiter item holds."""
    memo_key, key, since, until = json.loads(item["w"])
    return EventWait(memo_key=memo_key, name=name, key=key, since=since, until=until)


def event_item(p: str, name: str, key: str | None, data: bytes, at: int, uid: str) -> Item:
    """The item of an event ``send_event`` stores."""
    pk = f"{p}EV#{name}"
    return {"pk": pk, "sk": f"{at:016d}#{uid}", "k": key, "d": data, "at": at, "tp": f"{p}EVP"}


def stored_event(name: str, item: Item) -> StoredEvent:
    return StoredEvent(name=name, key=item.get("k"), data=bytes(item.get("d", b"")), at=item["at"])


@dataclass
class WfPlan:
    """What the workflow operations of one plan write besides the execution item's
    ``sets``: built by :meth:`op` as the interpreter meets them, in order."""

    p: str
    x: Exec
    now: int
    steps: list[list[Any]] = field(default_factory=list)
    memos: dict[str, list[int]] = field(default_factory=dict)
    waits: dict[str, str] = field(default_factory=dict)
    puts: list[Item] = field(default_factory=list)
    """Items written in the execution's transaction (waits, a parent's step end)."""
    inert: list[Item] = field(default_factory=list)
    """Items nothing reads before the execution names them (memo values, children's
    jobs): in the transaction when they fit, else written just before it."""
    deletes: list[tuple[str, str]] = field(default_factory=list)
    late: list[dict[str, Any]] = field(default_factory=list)
    """Keys deleted after the transaction (set by the interpreter)."""
    kids: dict[int, NewJob] = field(default_factory=dict)
    """Children added (their jobs are enqueued by a ``Release`` of their step)."""
    subs: list[str] = field(default_factory=list)
    """Sub-executions whose step a cancel or the deadline ended: cancelled after."""
    parent: str | None = None
    """A sub-execution that finished: its parent, advanced after."""
    last: plan.SetExecution | None = None

    def __post_init__(self) -> None:
        self.steps = [[sid, list(deps)] for sid, deps in self.x.steps]
        self.memos = {k: list(v) for k, v in self.x.memos.items()}
        self.waits = dict(self.x.waits)

    @property
    def pk(self) -> str:
        return str(self.x.item["pk"])

    def op(self, op: plan.Op, sets: Item, cells: list[Cell], todo: list[JobOp]) -> None:
        """Apply one workflow operation (``plan``'s table, *workflows*)."""
        if isinstance(op, plan.PutMemo):
            self._put_memo(op, sets)
        elif isinstance(op, plan.DropMemos):
            for key in op.keys:
                old = self.memos.pop(key, None)
                if old is not None:
                    self.deletes.append((self.pk, f"M#{old[1]:08d}"))
            sets["mk"] = json.dumps(self.memos)
        elif isinstance(op, plan.AddStep):
            self._add_step(op, sets, cells, todo)
        elif isinstance(op, plan.SetAwaiting):
            sets["aw"] = list(op.idxs) or None
        elif isinstance(op, plan.AddWaiter):
            w = op.wait
            self.waits[w.memo_key] = w.name
            pk, sk = waiter_key(self.p, w.name, self.x.id, w.memo_key)
            blob = json.dumps([w.memo_key, w.key, w.since, w.until])
            self.puts.append({"pk": pk, "sk": sk, "x": self.x.id, "w": blob})
            sets["wt"] = json.dumps(self.waits)
        elif isinstance(op, plan.DropWaiter):
            self._drop_wait(op.memo_key, sets)
        elif isinstance(op, plan.Reopened):  # Started (after it) indexes the deadline again
            sets.update(fa=None, tp=None, tx=None)
        elif not isinstance(op, plan.SetUnmet):  # no unmet counters here: folds read the view
            raise StorageError(f"sqs backend: unknown plan operation {op!r}")

    def _put_memo(self, op: plan.PutMemo, sets: Item) -> None:
        get = self.x.item.get
        mq, mw = int(sets.get("mq", get("mq", 0)) or 0), int(sets.get("mw", get("mw", 0)) or 0)
        old = self.memos.get(op.key)
        if old is None:
            mq += 1
        else:
            self.deletes.append((self.pk, f"M#{old[1]:08d}"))
        mw += 1
        seq = mq if old is None else old[0]
        self.memos[op.key] = [seq, mw, self.now]
        memo, *chunks = output_fields(self.pk, f"M#{mw:08d}", op.value)  # large: chunks
        self.inert += [{**memo, "k": op.key, "n": seq, "at": self.now}, *chunks]
        sets.update(mk=json.dumps(self.memos), mq=mq, mw=mw)

    def _add_step(self, op: plan.AddStep, sets: Item, cells: list[Cell], todo: list[JobOp]) -> None:
        if op.idx != len(self.steps):
            raise StorageError(
                f"execution {self.x.id}: step index {op.idx} is not the next one "
                f"({len(self.steps)})"
            )
        self.steps.append([op.step, []])
        cells.append((op.state, op.job is not None, None))
        sets["sp"] = pack(json.dumps(self.steps))
        if op.job is not None:  # enqueued now: the release of its stored job (JC#)
            self.kids[op.idx] = op.job
            todo.append(plan.Release(op.step, op.idx, op.job.flow_deadline_at))

    def _drop_wait(self, memo_key: str, sets: Item) -> None:
        name = self.waits.pop(memo_key, None)
        if name is not None:
            self.deletes.append(waiter_key(self.p, name, self.x.id, memo_key))
            sets["wt"] = json.dumps(self.waits) if self.waits else None

    def finished(self, sets: Item) -> None:
        """``Finished``: a workflow's waits are dropped; a sub-execution ends its
        parent's step by an event in the parent's partition (folded by its advance)."""
        for memo_key in list(self.waits):
            self._drop_wait(memo_key, sets)
        pi, px = self.x.item.get("pi"), self.x.item.get("px")
        if pi is not None and px is not None and self.last is not None:
            st = workflow.sub_step_state(self.last.state).value
            why = None if self.last.reason is None else self.last.reason.value
            ev = {"pk": f"{self.p}X#{pi}", "sk": f"E#{px:06d}#00001#a", "i": px, "n": 1}
            self.puts.append({**ev, "st": st, "rsn": why, "dp": f"{self.p}XA", "dx": self.now})
            self.parent = str(pi)

    def job_op(self, op: plan.Op, cells: list[Cell]) -> None:
        """A cancel or timeout of a workflow's step that stands for a sub-execution (no
        job: never released) cancels that execution after the write."""
        if (
            self.x.kind == _WORKFLOW
            and isinstance(op, (plan.EndJob, plan.RequestCancel))
            and op.idx > 0
            and not cells[op.idx][1]
        ):
            self.subs.append(sub_execution_id(self.x.id, op.idx))

    def set_execution(self, op: plan.SetExecution) -> None:
        self.last = op

    @property
    def state(self) -> ExecutionState | None:
        return None if self.last is None else self.last.state


_JOB_OPS = (plan.EndJob, plan.RequestCancel, plan.Release, plan.SetReady, plan.Wake)


def exec_sets(
    p: str, x: Exec, ops: Sequence[plan.Op], now: int, sets: Item
) -> tuple[Item, list[JobOp], WfPlan]:
    """The execution item's part of the interpreter: the SET values (``None``: REMOVE)
    applying the execution's own operations of ``ops`` to ``x``, added to ``sets``; the
    job operations, in order; and the workflow operations' other writes."""
    sets, cells, todo = dict(sets), list(x.cells), list[JobOp]()
    wf = WfPlan(p, x, now)
    for op in ops:
        if isinstance(op, plan.SetStep):
            cells[op.idx] = (op.state, cells[op.idx][1], op.reason)
        elif isinstance(op, plan.SetExecution):
            why = None if op.reason is None else op.reason.value
            sets.update(st=op.state.value, rsn=why, fs=op.failed_step, dl=op.deadline_at)
            wf.set_execution(op)
        elif isinstance(op, plan.Started):
            sets["sa"] = now
            if op.deadline_at is not None:  # the reaper's deadline index
                sets.update(tp=f"{p}XT", tx=op.deadline_at)
        elif isinstance(op, plan.Finished):  # out of the deadline index, into prune's
            sets.update(fa=now, tp=f"{p}XF", tx=now)
            wf.finished(sets)
        elif isinstance(op, _JOB_OPS):
            wf.job_op(op, cells)
            if isinstance(op, plan.Release):
                cells[op.idx] = (cells[op.idx][0], True, cells[op.idx][2])
            todo.append(op)
        else:
            wf.op(op, sets, cells, todo)
    if (text := cells_text(cells)) != x.cells_text:
        sets["ss"] = pack(text)
    return sets, todo, wf

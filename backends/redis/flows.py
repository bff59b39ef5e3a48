"""Flow executions on Redis (``SupportsFlows``): Python reads, the core decides
(:mod:`queue_core.rules.flows.plan`), one Lua interpreter applies (``lua/_flow.lua``).

A step job's end is recorded by the script that ends it (``finish``/``reap``/``cancel.lua``)
as an event ``idx|job state|job reason|attempt`` of its execution (``P:xe:<e>``, moving its
version, adding it to ``P:xadv``); a claim too while events are pending. The jobs part then
calls :meth:`RedisFlows.advance_ends`: :func:`~.folding.fold_fast` decides from the counters
(``c.<state>``, ``P:xu``) and O(events + dependents) reads, else :func:`~.folding.fold` on the
full view (then a cancel, or :func:`~.decide.advance` for the reaper's deadline), and
``flow_apply.lua`` writes the plan, serialized once (:data:`_ENCODE`), only if the version
is unchanged (an optimistic lock: on a conflict the advance reads again). Design:
``docs/design/flows-storage.md`` §10. Built on first use (``RedisStorage.flows``).

On a Redis Cluster every key of every execution, and its step jobs, live in the storage's
shared home (``backends/redis/homes.py``), so a step's end, recorded with the job, and the
advance that follows each touch one slot.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Literal, overload

from backends.redis.errors import translate_errors
from backends.redis.flow_encode import Blobs, encode_ops
from backends.redis.flow_inputs import Indexes, StepInputsReader, parse_index
from backends.redis.fold_reads import Prefetched
from backends.redis.records import job_args, reaped_jobs
from backends.redis.store import RedisStore
from queue_core.records.errors import LeaseLost, NotFound, StorageError
from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.jobs import ReapedJob
from queue_core.rules.flows import decide, plan
from queue_core.rules.flows import fold as folding
from queue_core.rules.flows.decide import ExecutionSlot, ExecutionView, StepView, Transition
from queue_core.rules.flows.decide_fast import ExecutionHead, StepIndex
from queue_core.rules.flows.spec import ConcurrencySpec
from queue_core.rules.paging import check_page
from queue_core.storage.flows import (
    ExecutionRecord,
    NewExecution,
    StepInputs,
    StepRecord,
    step_job_id,
)

__all__ = ["RedisFlows"]

log = logging.getLogger("backends.redis")
E, S = ExecutionState, StepState
_TRIES = 200
"""Optimistic-lock retries of one advance before it is left to the reaper."""
FIELDS = ["fl", "sh", "st", "rs", "fs", "mp", "to", "dl", "ca", "sa", "fa", "ck", "cl", "cb", "v"]
FIELDS += ["sp", *(f"c.{s.value}" for s in StepState), "k", "aw", "pi", "px"]
_FAST_FIELDS = [f for f in FIELDS if f != "sp"]
"""An advance's fields: the step list (``sp``, O(steps) bytes) comes from
:attr:`RedisFlows._indexes`."""


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def _int(value: bytes | None) -> int | None:
    return None if value is None else int(value)


@functools.lru_cache(maxsize=4096)
def _step(raw: bytes) -> tuple[StepState, bool, str | None]:
    """A ``P:xs`` value, ``state|released (1/0)|reason``."""
    state, released, reason = raw.decode().split("|", 2)
    return StepState(state), released == "1", reason or None


@functools.lru_cache(maxsize=4096)  # an advance that conflicts reads them again
def _event(raw: bytes) -> folding.StepEvent:
    """A ``P:xe`` entry, ``idx|state|reason|attempt`` (no attempt: stored before it was)."""
    idx, state, reason, *att = raw.decode().split("|")
    return folding.StepEvent(int(idx), StepState(state), int(att[0]) if att else 0, reason or None)


Row = dict[str, bytes | None]
Head = tuple[list[Any], list[bytes], Prefetched | None]
"""An execution's :data:`_FAST_FIELDS` values and pending events (``P:xe``), as read, and
the step fields read with them (:mod:`~backends.redis.fold_reads`)."""


def _head(f: dict[str, bytes | None]) -> ExecutionHead:
    rs = _text(f["rs"])
    return ExecutionHead(
        state=ExecutionState(_text(f["st"])),
        max_parallel=int(f["mp"] or 0),
        deadline_at=_int(f["dl"]),
        reason=None if rs is None else ExecutionReason(rs),
        failed_step=_text(f["fs"]),
        kind=_text(f["k"]) or "flow",
    )


def _awaiting(f: dict[str, bytes | None]) -> tuple[int, ...]:
    """A waiting workflow's awaited step indexes (field ``aw``, comma-separated)."""
    return tuple(int(i) for i in f["aw"].split(b",")) if f["aw"] else ()


Exec = tuple[Row, StepIndex, list[tuple[StepState, bool, str | None]], list[folding.StepEvent]]
"""An execution as read: its fields, steps, (state, released, reason) by step, events."""
More = dict[str, Any]
"""A workflow's extra reads: ``xm`` (memo values), ``xmi`` (memo ``seq|at``), ``xw`` (event
waits: memo key -> name), and ``slots`` / ``spec`` (its concurrency key's executions and
limit) when asked."""
_MORE = ("xm", "xmi", "xw")
Build = Callable[[ExecutionView, StepIndex, Row, More], list[plan.Op]]
"""What a workflow's change adds to the plan, from the execution as folded."""
Plan = tuple[Row, int, ExecutionState, list[plan.Op], bool]
"""A decided advance: the fields read, events folded, state after, operations, finished."""


def _view(f: Row, index: StepIndex, states: list[Any]) -> ExecutionView:
    h, steps = _head(f), zip(index.ids, index.depends_on, states, strict=True)
    return ExecutionView(
        state=h.state, steps=tuple(StepView(sid, st[0], deps) for sid, deps, st in steps),
        max_parallel=h.max_parallel, timeout_ms=_int(f["to"]), deadline_at=h.deadline_at,
        reason=h.reason, failed_step=h.failed_step, kind=h.kind,
        awaiting=tuple(index.ids[i] for i in _awaiting(f)),
    )  # fmt: skip


Result = tuple[ExecutionState | None, list[ReapedJob], str | None]
"""An applied advance: the execution's state after it, the step jobs it timed out, and the
concurrency key to promote (the execution finished)."""


def _record(eid: str, f: dict[str, bytes | None], spec: bytes | None) -> ExecutionRecord:
    h, sh = _head(f), _text(f["sh"]) or ""
    return ExecutionRecord(
        id=eid, flow=_text(f["fl"]) or "", state=h.state, reason=h.reason, spec_hash=sh,
        failed_step=h.failed_step, spec_json=_text(spec) or "", input=f["in"] or b"",
        max_parallel=h.max_parallel, timeout_ms=_int(f["to"]), deadline_at=h.deadline_at,
        created_at=int(f["ca"] or 0), started_at=_int(f["sa"]), finished_at=_int(f["fa"]),
        conc_key=_text(f["ck"]), kind=h.kind, parent_id=_text(f["pi"]),
        parent_idx=_int(f["px"]), awaiting=_awaiting(f),
    )  # fmt: skip


class RedisFlows:
    """The flow operations of one store (see the module doc)."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._start = store.script("flow_start")
        self._apply_ops = store.script("flow_apply")
        self._indexes = Indexes()
        """Step indexes read (:mod:`backends.redis.flow_inputs`): an advance whose step
        counters sum to its index's length reads no step list."""
        self.inputs = StepInputsReader(store, self._indexes)

    # ------------------------------------------------------------------ reading

    @overload
    def _read(self, eid: str) -> Exec | None: ...
    @overload
    def _read(self, eid: str, more: Literal[True]) -> tuple[Exec, More] | None: ...
    def _read(self, eid: str, more: bool = False) -> Exec | tuple[Exec, More] | None:
        """The execution; ``more``: also its memos and event waits (a workflow's)."""
        key = self.store.key
        with translate_errors("read execution"):
            pipe = self.store.client.pipeline(transaction=True)
            pipe.hmget(key("x", eid), FIELDS)
            pipe.hgetall(key("xs", eid))
            pipe.lrange(key("xe", eid), 0, -1)
            for family in _MORE if more else ():
                pipe.hgetall(key(family, eid))
            row, xs, events, *extra = pipe.execute()
        if row[2] is None:
            return None
        f = dict(zip(FIELDS, row, strict=True))
        index = parse_index(f["sp"] or b"[]")
        self._indexes.remember(eid, f["sh"], index)
        states = [_step(xs[str(i).encode()]) for i in range(len(index.ids))]
        x = f, index, states, [_event(e) for e in events]
        return (x, dict(zip(_MORE, extra, strict=True))) if more else x

    def _key_slots(self, ck: str) -> tuple[str, list[ExecutionSlot], ConcurrencySpec | None]:
        """The version of concurrency key ``ck`` and its executions, as admit/promote see them."""
        key = self.store.key
        with translate_errors("read concurrency"):
            pipe = self.store.client.pipeline(transaction=True)
            pipe.get(key("xkv", ck))
            pipe.zrange(key("xka", ck), 0, -1)
            kv, members = pipe.execute()
            pipe = self.store.client.pipeline(transaction=False)
            for m in members:
                pipe.hmget(key("x", m.decode()), ["st", "ca", "cl", "cb"])
            rows = pipe.execute() if members else []
        slots: list[ExecutionSlot] = []
        spec: ConcurrencySpec | None = None
        for m, (st, ca, cl, cb) in zip(members, rows, strict=True):
            if st is not None:
                slots.append(ExecutionSlot(m.decode(), ExecutionState(st.decode()), int(ca)))
                if cl is not None and spec is None:
                    spec = ConcurrencySpec(int(cl), cb.decode())
        return (_text(kv) or "0"), slots, spec

    # ------------------------------------------------------------------ applying

    def _apply(
        self,
        now: int,
        eid: str,
        version: str,
        folded: int,
        ops: Sequence[plan.Op],
        *key: str,
        guard: str = "",
    ) -> list[ReapedJob] | None:
        """``flow_apply.lua``: ``ops`` if the execution is still at ``version`` (and
        ``key`` = concurrency key, its version, ``promote``/``unmark``, at its version; and
        ``guard``, a workflow's: see the script); the step jobs timed out, or ``None`` when
        a version moved (nothing written). Then the follow-ups the script names: a
        sub-execution's end advances its parent, a sub-execution's step cancels it.

        Raises:
            LeaseLost: the guard's attempt is not current (nothing written).
        """
        strict = any(type(op) in (plan.EndJob, plan.RequestCancel) for op in ops)
        blobs: Blobs = []
        args = self.store.args(now)
        args += (eid, version, folded, *(key or ("", "", "")), encode_ops(ops, blobs))
        args += ("1" if strict else "", guard, *blobs)
        with translate_errors("flow"):
            res = self.store.run(self._apply_ops, args)
        if res[0] == 2:
            raise LeaseLost(f"the attempt is not a current one of execution {eid}")
        if res[0] == 0:
            return None
        follow = [x.decode() for x in res[2]]
        for kind, other in zip(follow[::2], follow[1::2], strict=True):
            judge = None if kind == "a" else functools.partial(decide.cancel, now=now)
            self._advance(other, now, judge)
        return reaped_jobs(res[1])

    def update(
        self,
        eid: str,
        now: int,
        build: Build,
        guard: Callable[[Row], str] | None = None,
        with_key: bool = False,
    ) -> ExecutionState | None:
        """A workflow's change (``backends/redis/workflows.py``): the execution read with
        its memos and waits (:data:`More`), its pending events folded, then ``build``'s
        operations, written under the version read (retried on a conflict); its state
        after, ``None`` when it is gone. ``build`` may raise before anything is written;
        ``guard`` (called after it) gives ``flow_apply.lua``'s guard; ``with_key`` also
        reads the concurrency key (``More["slots"]``), whose version the write checks."""
        for _ in range(_TRIES):
            got = self._read(eid, more=True)
            if got is None:
                return None
            (f, index, states, events), more = got
            ck = _text(f["ck"]) if with_key else None
            key: tuple[str, ...] = ()
            if ck is not None:
                kv, more["slots"], more["spec"] = self._key_slots(ck)
                key = (ck, kv, "promote")
            done = folding.fold(_view(f, index, states), index, events, now)
            ops = done.ops + build(done.view, index, f, more)
            states_set = [op.state for op in ops if isinstance(op, plan.SetExecution)]
            state = states_set[-1] if states_set else done.view.state
            if not ops and not events:
                return state
            g = guard(f) if guard is not None else ""
            if self._apply(now, eid, _text(f["v"]) or "0", len(events), ops, *key, guard=g) is None:
                continue
            ck = _text(f["ck"])
            if ck is not None and any(isinstance(op, plan.Finished) for op in ops):
                self._promote(ck, now)
            return state
        raise StorageError(f"execution {eid}: too much contention")

    def _fast(self, eid: str, now: int, head: Head | None = None) -> Plan | None | Literal[False]:
        """:func:`~.folding.fold_fast` from the execution's head and counters (``head``: as
        ``finish.lua`` read them, else read here) and O(events + dependents) step reads;
        ``None`` when it is gone, ``False`` for the full view."""
        key = self.store.key
        if head is not None:
            row, raw, pre = head
        else:
            with translate_errors("read execution"):
                pipe = self.store.client.pipeline(transaction=True)
                pipe.hmget(key("x", eid), _FAST_FIELDS)
                pipe.lrange(key("xe", eid), 0, -1)
                row, raw = pipe.execute()
            pre = None
        f = dict(zip(_FAST_FIELDS, row, strict=True))
        if f["st"] is None or int(f["c.pending"] or -1) < 0:  # no counters: stored before them
            return None if f["st"] is None else False
        counts = {s: int(f[f"c.{s.value}"] or 0) for s in StepState}
        index = self._fast_index(eid, f["sh"], sum(counts.values()))
        if index is None:
            return False
        events = [_event(e) for e in raw]

        def read(steps: Sequence[int], deps: Sequence[int]) -> Any:
            if pre is not None and pre.covers(steps, deps):  # finish.lua read them
                got, unmet = pre.values(steps, deps)
            else:
                with translate_errors("read execution"):
                    pipe = self.store.client.pipeline(transaction=True)
                    pipe.hmget(key("xs", eid), [*steps, *deps])
                    if deps:
                        pipe.hmget(key("xu", eid), deps)
                    got, *more = pipe.execute()
                unmet = more[0] if deps else []
            if None in got or None in unmet:
                return None
            states = dict(zip([*steps, *deps], (_step(v)[0] for v in got), strict=True))
            return states, {d: int(v) for d, v in zip(deps, unmet, strict=True) if v is not None}

        done = folding.fold_fast(_head(f), index, counts, events, read, now)
        return False if done is None else (f, len(events), done.head.state, done.ops, done.finished)

    def known_index(self, eid: str) -> StepIndex | None:
        """``eid``'s step index as last read, if this process read it (no I/O)."""
        known = self._indexes.get(eid)
        return None if known is None else known[1]

    def _fast_index(self, eid: str, sh: bytes | None, steps: int) -> StepIndex | None:
        """``eid``'s step index of ``steps`` steps: remembered, else read (``sp``, no step
        states); ``None`` when the steps read are not the ``steps`` counted (a workflow
        added one between the two reads: the caller reads the whole execution)."""
        known = self._indexes.get(eid)
        if known is not None and known[0] == (sh or b"") and len(known[1].ids) == steps:
            return known[1]
        with translate_errors("read execution"):
            sp = self.store.client.hget(self.store.key("x", eid), "sp")
        index = parse_index(sp or b"[]")
        if len(index.ids) != steps:
            return None
        self._indexes.remember(eid, sh, index)
        return index

    def _try(
        self,
        eid: str,
        now: int,
        judge: Callable[[ExecutionView], Transition] | None,
        head: Head | None = None,
    ) -> Result | None:
        """One optimistic attempt: fold the pending events, then ``judge`` (no judge:
        fast when it can, from ``head`` when given); ``None`` on a conflict."""
        got = self._fast(eid, now, head) if judge is None else False
        if got is False:
            x = self._read(eid)
            if x is not None:
                f, index, states, events = x
                done = folding.fold(_view(f, index, states), index, events, now, judge)
                got = (f, len(events), done.view.state, done.ops, done.finished)
        if not got:
            return None, [], None  # gone
        f, folded, state, ops, finished = got
        if not ops and not folded:
            return state, [], None
        reaped = self._apply(now, eid, _text(f["v"]) or "0", folded, ops)
        if reaped is None:
            return None
        return state, reaped, _text(f["ck"]) if finished else None

    def _advance(
        self,
        eid: str,
        now: int,
        judge: Callable[[ExecutionView], Transition] | None = None,
        head: Head | None = None,
    ) -> Result | None:
        """Advance ``eid`` (retrying on a conflict; ``head``: the first try's read, as
        ``finish.lua`` returned it), then promote the key of an execution that finished;
        ``None`` when it is left in ``P:xadv`` for the reaper."""
        for _ in range(_TRIES):
            got = self._try(eid, now, judge, head)
            head = None  # a conflict: the next try reads again
            if got is not None:
                if got[2] is not None:
                    self._promote(got[2], now)
                return got
        return None

    def _promote(self, ck: str, now: int) -> None:
        """Start the queued executions of ``ck`` that have a place (decide.promote), one at
        a time under the key's version; forget the key when none is left to start."""
        for _ in range(_TRIES):
            kv, slots, spec = self._key_slots(ck)
            ids = decide.promote(spec, slots) if slots else ()
            if not ids:
                if self._apply(now, "", "", 0, [], ck, kv, "unmark") is not None:
                    return
                continue
            x = self._read(ids[0])
            if x is None:
                continue  # gone since the key was read: read it again
            f, index, states, _ = x
            ops = plan.start_ops(_view(f, index, states), index, decide.Admission(E.RUNNING), now)
            self._apply(now, ids[0], _text(f["v"]) or "0", 0, ops, ck, kv, "promote")

    # ------------------------------------------------------------------ the jobs part's calls

    def advance_ends(
        self, eids: Sequence[str], now: int | None, heads: dict[str, Head] | None = None
    ) -> None:
        """Advance the executions whose step jobs just ended (``heads``: their heads and
        events as ``finish.lua`` read them). The ends are already durable (and their
        executions in ``P:xadv``): a failure here is logged and left to the next ``reap``,
        never reported as a failed ``finish``/``cancel``."""
        try:
            t = self.store.now(now)
            for eid in dict.fromkeys(eids):
                self._advance(eid, t, head=None if heads is None else heads.get(eid))
        except StorageError as exc:
            log.warning("flow advance of %s left to the reaper: %s", ", ".join(eids), exc)

    def reap(self, eids: Sequence[str], keys: Sequence[str], now: int) -> list[ReapedJob]:
        """The reaper's: advance ``eids`` (past their deadline: ``decide.advance`` times them
        out; with pending events: left by this reap or a killed caller), then promote
        ``keys`` (a promotion may have been lost); the step jobs timed out."""
        reaped: list[ReapedJob] = []
        for eid in eids:
            reaped += (self._advance(eid, now) or (None, []))[1]
        for ck in keys:
            self._promote(ck, now)
        return reaped

    # ------------------------------------------------------------------ SupportsFlows

    def start_execution(self, new: NewExecution, now: int | None) -> ExecutionState:
        """``SupportsFlows.start_execution``: admitted, stored and started in ``flow_start.lua``."""
        t = self.store.now(now)
        ck, index = new.conc_key, plan.index_of(new.steps)
        view = ExecutionView(state=E.QUEUED, steps=new.steps, max_parallel=new.max_parallel)
        view = replace(view, timeout_ms=new.timeout_ms)
        steps = json.dumps([[s.id, list(s.depends_on)] for s in new.steps])
        fields = ["fl", new.flow, "sh", new.spec_hash, "mp", str(new.max_parallel), "sp", steps]
        if new.timeout_ms is not None:
            fields += ("to", str(new.timeout_ms))
        if ck is not None and new.concurrency is not None:
            fields += ("ck", ck, "cl", str(new.concurrency.limit), "cb", new.concurrency.behavior)
        if new.kind != "flow":
            fields += ("k", new.kind)
        if new.parent_id is not None:
            fields += ("pi", new.parent_id, "px", str(new.parent_idx))
        unmet = [str(x) for i, n in enumerate(index.unmet) if n for x in (i, n)]
        head: dict[str, Any] = {"id": new.id, "fields": fields, "flow": new.flow}
        head.update(sh=new.spec_hash, ck=ck or "", sid=list(index.ids), un=unmet)
        rr = [j.concurrency_group for j in new.jobs if j.concurrency_behavior == "round_robin"]
        head["rr"] = (rr[0] or new.flow) if rr else ""  # the group its step jobs take turns in
        jobs = [x for j in new.jobs for x in job_args(j)]
        # on a cluster the execution and its step jobs live in the shared home: a claim of
        # the steps' queues looks there once the queues are marked (backends/redis/homes.py)
        self.store.homes.prepare((self.store.homes.shared, j.queue) for j in new.jobs)
        for _ in range(_TRIES):
            admission, head["kv"] = decide.Admission(E.RUNNING), ""
            if ck is not None:
                head["kv"], slots, _ = self._key_slots(ck)
                admission = decide.admit(new.concurrency, slots)
            head["sup"] = self._superseded(admission, new, t)
            if head["sup"] is None:
                continue
            ops = plan.start_ops(view, index, admission, t)
            head["active"] = admission.state is not E.SKIPPED
            args = [json.dumps(head), new.input, new.spec_json, encode_ops(ops), *jobs]
            with translate_errors("flow"):
                res = self.store.run(self._start, self.store.args(t) + args)
            if res[0] == b"retry":
                continue
            if res[0] == b"dup":
                raise StorageError(f"execution id {new.id!r} already exists")
            state = [op.state for op in ops if isinstance(op, plan.SetExecution)][-1]
            if ck is not None and admission.state is E.RUNNING and state.finished:
                self._promote(ck, t)
            return state
        raise StorageError(f"start_execution {new.id}: too much contention on key {ck!r}")

    def _superseded(
        self, admission: decide.Admission, new: NewExecution, now: int
    ) -> list[list[str]] | None:
        """``flow_start.lua``'s ``sup``: for each execution ``admission`` supersedes, its id,
        its version and the ops of :func:`~queue_core.rules.flows.plan.supersede_ops` on its
        view, its pending events folded first (``flow_start.lua`` checks that neither moved);
        ``None`` when one changed while being read (read the key again)."""
        out: list[list[str]] = []
        for eid in admission.supersede:
            assert new.concurrency is not None
            self._advance(eid, now)  # fold its pending events: the view is then exact
            x = self._read(eid)
            if x is None or x[3]:
                return None
            f, index, states, _ = x
            _, ops = plan.supersede_ops(
                _view(f, index, states), index, new.concurrency.behavior, now
            )
            out.append([eid, _text(f["v"]) or "0", encode_ops(ops)])
        return out

    def cancel_execution(self, execution_id: str, now: int | None) -> ExecutionState:
        """``SupportsFlows.cancel_execution``: the pending events folded, then ``decide.cancel``."""
        t = self.store.now(now)
        got = self._advance(execution_id, t, lambda v: decide.cancel(v, t))
        if got is None:
            raise StorageError(f"cancel_execution {execution_id}: too much contention")
        if got[0] is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return got[0]

    def _records(self, ids: Sequence[str]) -> list[ExecutionRecord]:
        names, key = [*FIELDS, "in"], self.store.key
        with translate_errors("get_execution"):
            pipe = self.store.client.pipeline(transaction=False)
            for eid in ids:
                pipe.hmget(key("x", eid), names)
            rows = zip(ids, pipe.execute() if ids else [], strict=True)
            found = [(eid, dict(zip(names, r, strict=True))) for eid, r in rows if r[2] is not None]
            hashes = list(dict.fromkeys(_text(f["sh"]) or "" for _, f in found))
            texts = self.store.client.mget([key("fs", h) for h in hashes]) if hashes else []
        specs = dict(zip(hashes, texts, strict=True))
        return [_record(eid, f, specs[_text(f["sh"]) or ""]) for eid, f in found]

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """``SupportsFlows.get_execution``."""
        found = self._records([execution_id])
        return found[0] if found else None

    def list_executions(
        self, flow: str | None, state: ExecutionState | None, limit: int, offset: int
    ) -> list[ExecutionRecord]:
        """``SupportsFlows.list_executions``, newest first; a filter by state scans the
        (flow's) executions from the newest until the page is full."""
        limit, offset = check_page(limit, offset)
        key = f"{self.store.key_prefix}:xl" if flow is None else self.store.key("xl", flow)
        limit, skip = max(limit, 0), max(offset, 0)
        out: list[ExecutionRecord] = []
        start, batch = (skip, limit) if state is None else (0, 200)
        while len(out) < limit:
            with translate_errors("list_executions"):
                ids = self.store.client.zrevrange(key, start, start + batch - 1)
            page = self._records([i.decode() for i in ids])
            if state is None:
                return page
            if not ids:
                break
            start += batch
            for rec in (r for r in page if r.state is state):
                if skip:
                    skip -= 1
                elif len(out) < limit:
                    out.append(rec)
        return out

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """``SupportsFlows.list_steps``."""
        x = self._read(execution_id)
        if x is None:
            return []
        f, index, states, _ = x
        steps = zip(index.ids, index.depends_on, states, strict=True)
        return [
            StepRecord(execution_id=execution_id, idx=i, step_id=sid, state=st, reason=reason,
                       job_id=step_job_id(execution_id, i) if released else None, depends_on=deps)
            for i, (sid, deps, (st, released, reason)) in enumerate(steps)
        ]  # fmt: skip

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """``SupportsFlows.get_step_inputs`` (:class:`StepInputsReader`)."""
        return self.inputs.get(execution_id, step_id)

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """``SupportsStepInputsBatch.get_step_inputs_batch`` (:class:`StepInputsReader`)."""
        return self.inputs.batch(steps)

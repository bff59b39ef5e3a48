"""Flow executions on Redis (:class:`~queue_core.flows.storage.SupportsFlows`).

Shape (B) of ``docs/design/flows-storage.md`` §10: a durable event record plus an
idempotent advance. The scripts that end a step job's attempt (``finish.lua``,
``reap.lua``, ``cancel.lua``) append the step's end to the execution's pending events
(``P:xe:<id>``) and add the execution to ``P:xadv`` *in the same script*; then Python
advances the execution: it reads the execution (with its version), folds the pending
events through :func:`queue_core.flows.decide.step_ended`, judges the rest with
:func:`~queue_core.flows.decide.advance` (or ``cancel`` / ``start``), and hands the
transitions to ``flow_apply.lua``, which writes them only if the version is unchanged
(an optimistic lock, like ``WATCH``/``MULTI``; on a conflict the advance reads again).
No rule of :mod:`queue_core.flows.decide` is re-derived in Lua.

The caller of ``finish``/``cancel`` advances right after; ``reap`` advances every
execution left in ``P:xadv`` (a worker killed between its finish and the advance
stalls nothing: the next reaper finishes the job), the running executions whose
deadline passed (``P:xdl``), and re-runs promotion for concurrency keys in ``P:xpk``.
The key layout is in ``lua/_flow.lua``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from redis.commands.core import Script

from backends.redis.errors import translate_errors
from backends.redis.flow_fast import FastAdvance
from backends.redis.flow_records import (
    EXEC_FIELDS,
    Exec,
    Op,
    execution_record,
    index_of,
    job_args,
    parse_step,
    start_fields,
    start_index,
    start_plan,
    text,
    transition_ops,
    unmet_fields,
)
from backends.redis.keys import Keys
from queue_core.errors import NotFound, StorageError
from queue_core.model import JobState, Outcome, ReapedJob

if TYPE_CHECKING:  # at run time from backends.redis.flow_names, on a first flow operation
    from queue_core.flows.decide import ExecutionSlot, ExecutionView, Transition
    from queue_core.flows.model import ConcurrencySpec, ExecutionState
    from queue_core.flows.storage import ExecutionRecord, NewExecution, StepInputs, StepRecord

__all__ = ["RedisFlows"]

log = logging.getLogger("backends.redis")

_TRIES = 200
"""Optimistic-lock retries of one advance before it is left to the reaper."""


class RedisFlows(FastAdvance):
    """The :class:`~queue_core.flows.storage.SupportsFlows` operations of ``redis://``,
    mixed into :class:`backends.redis.RedisStorage`."""

    keys: Keys
    _r: Any
    _flow_start: Script
    _flow_apply: Script

    def _args(self, now: int | None) -> list[Any]:  # pragma: no cover - RedisStorage's
        raise NotImplementedError

    def _run(self, script: Script, args: list[Any]) -> Any:  # pragma: no cover - idem
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers

    def _x(self, kind: str, name: str) -> str:
        return f"{self.keys.prefix}:{kind}:{name}"

    def _flow_now(self, now: int | None) -> int:
        """``now``, or the server's clock (the scripts' clock when ``now`` is omitted)."""
        if now is not None:
            return now
        with translate_errors("time"):
            sec, usec = self._r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def _read_exec(self, eid: str) -> tuple[Exec | None, list[bytes]]:
        with translate_errors("read execution"):
            pipe = self._r.pipeline(transaction=True)
            pipe.hmget(self._x("x", eid), EXEC_FIELDS)
            pipe.hgetall(self._x("xs", eid))
            pipe.lrange(self._x("xe", eid), 0, -1)
            row, xs, events = pipe.execute()
        if row[0] is None:
            return None, []
        f = dict(zip(EXEC_FIELDS, row, strict=True))
        index = index_of(f["sp"])
        states = [parse_step(xs[str(i).encode()]) for i in range(len(index.ids))]
        return Exec(eid, f, index, states), list(events)

    def _run_flow(self, script: Script, now: int, extra: Sequence[Any]) -> Any:
        args = self._args(now)
        args += extra
        with translate_errors("flow"):
            return self._run(script, args)

    def _apply(self, now: int, cas: list[list[str]], ops: list[Op]) -> list[ReapedJob] | None:
        """Run ``flow_apply.lua``; ``None`` when a version moved (nothing written)."""
        res = self._run_flow(self._flow_apply, now, [json.dumps({"cas": cas, "ops": ops})])
        if res[0] == 0:
            return None
        r = res[1]
        return [
            ReapedJob(
                job_id=r[i].decode(),
                attempt=int(r[i + 1]),
                outcome=Outcome.TIMED_OUT,
                reason=r[i + 3].decode(),
                state=JobState.TIMED_OUT,
            )
            for i in range(0, len(r), 5)
        ]

    def _try_change(
        self,
        eid: str,
        now: int,
        judge: Callable[[ExecutionView], Transition] | None,
        cas: list[list[str]] | None = None,
        extra: list[Op] | None = None,
    ) -> tuple[bool, ExecutionState | None, list[ReapedJob], str | None]:
        """One optimistic attempt: fold the pending events, then ``judge`` the result
        (``None``: a plain advance, ``decide.advance`` when no event was pending).

        Returns (applied or nothing to do, state after, timed-out jobs, concurrency key to
        promote); ``False`` first when a version moved.
        """
        from backends.redis.flow_names import S, StepState, StepView, decide

        if judge is None and cas is None and extra is None:
            fast = self._try_fast(eid, now)
            if fast is not None:
                return fast
        x, events = self._read_exec(eid)
        if x is None:
            return True, None, [], None
        view = x.view()
        ops: list[Op] = []
        finished = False
        for raw in events:
            i, st, reason = raw.decode().split("|", 2)
            sid = x.steps[int(i)][0]
            state = StepState(st)
            if state is S.RUNNING:  # claimed after an end that was not advanced yet
                view = replace(
                    view,
                    steps=tuple(
                        StepView(s.id, S.RUNNING, s.depends_on) if s.id == sid else s
                        for s in view.steps
                    ),
                )
                ops.append(["step", eid, i, S.RUNNING.value, "1", ""])
                continue
            ended = decide.step_ended(view, sid, state, now)
            ops += transition_ops(x, ended, {sid: reason})
            finished = finished or ended.finished
            view = decide.apply(view, ended)
        t: Transition | None = None
        if judge is not None:
            t = judge(view)
        elif not events:
            t = decide.advance(view, now)
        # else: step_ended has judged the execution after each event (it ends in advance)
        if t is not None and t.changes(view):
            ops += transition_ops(x, t)
            finished = finished or t.finished
            view = decide.apply(view, t)
        if events:
            ops.append(["events", eid, str(len(events))])
        if not ops and not extra:
            return True, view.state, [], None
        reaped = self._apply(now, [["x", eid, x.version], *(cas or [])], ops + (extra or []))
        if reaped is None:
            return False, None, [], None
        ck = x.conc_key if finished else None
        return True, view.state, reaped, ck

    def _change(
        self, eid: str, now: int, judge: Callable[[ExecutionView], Transition] | None
    ) -> tuple[ExecutionState | None, list[ReapedJob]]:
        """Fold the pending events and apply ``judge``, retrying on a version conflict;
        then promote the key of an execution that finished."""
        for _ in range(_TRIES):
            done, state, reaped, ck = self._try_change(eid, now, judge)
            if done:
                if ck is not None:
                    self._promote(ck, now)
                return state, reaped
        return None, []  # left in P:xadv for the reaper

    def _advance(self, eid: str, now: int) -> list[ReapedJob]:
        """Fold the pending events (each judged by ``step_ended``), or with none pending
        judge the execution by ``decide.advance`` (the deadline)."""
        return self._change(eid, now, None)[1]

    def _key_slots(self, ck: str) -> tuple[str, list[ExecutionSlot], ConcurrencySpec | None]:
        from backends.redis.flow_names import ConcurrencySpec, ExecutionSlot, ExecutionState

        with translate_errors("read concurrency"):
            pipe = self._r.pipeline(transaction=True)
            pipe.get(self._x("xkv", ck))
            pipe.zrange(self._x("xka", ck), 0, -1)
            kv, members = pipe.execute()
            pipe = self._r.pipeline(transaction=False)
            for m in members:
                pipe.hmget(self._x("x", m.decode()), ["st", "ca", "cl", "cb"])
            rows = pipe.execute() if members else []
        slots: list[ExecutionSlot] = []
        spec: ConcurrencySpec | None = None
        for m, (st, ca, cl, cb) in zip(members, rows, strict=True):
            if st is None:
                continue
            slots.append(ExecutionSlot(m.decode(), ExecutionState(st.decode()), int(ca)))
            if cl is not None and spec is None:
                spec = ConcurrencySpec(int(cl), cb.decode())
        return (text(kv) or "0"), slots, spec

    def _promote(self, ck: str, now: int) -> None:
        """Start the queued executions of ``ck`` that have a place (decide.promote), one
        at a time under the key's version; forget the key when none is left to start."""
        from backends.redis.flow_names import decide

        for _ in range(_TRIES):
            kv, slots, spec = self._key_slots(ck)
            ids = decide.promote(spec, slots) if slots else ()
            if not ids:
                if self._apply(now, [["k", ck, kv]], [["unmark", ck]]) is not None:
                    return
                continue
            # on a conflict (the key or the execution moved) read again
            self._try_change(
                ids[0], now, lambda v: decide.start(v, now), [["k", ck, kv]], [["kv", ck]]
            )

    # ------------------------------------------------------------------ hooks

    def _after_ends(self, eids: Sequence[str], now: int | None) -> None:
        """Advance the executions whose step jobs just ended. The ends are already durable
        (and their executions in ``P:xadv``): a failure here is logged and left to the
        next ``reap``, never reported as a failed ``finish``/``cancel``."""
        if not eids:
            return
        try:
            t = self._flow_now(now)
            for eid in dict.fromkeys(eids):
                self._advance(eid, t)
        except StorageError as exc:
            log.warning("flow advance of %s left to the reaper: %s", ", ".join(eids), exc)

    def _reap_flows_first(self, now: int, limit: int) -> list[ReapedJob]:
        """Running executions whose deadline passed: ``decide.advance`` times them out."""
        with translate_errors("reap"):
            due = self._r.zrangebyscore(f"{self.keys.prefix}:xdl", "-inf", now, 0, limit)
        reaped: list[ReapedJob] = []
        for eid in due:
            reaped += self._advance(eid.decode(), now)
        return reaped

    def _reap_flows_after(self, now: int, limit: int) -> list[ReapedJob]:
        """Executions with pending events (ended by this reap, or left by a killed
        caller), then concurrency keys whose promotion may have been lost."""
        with translate_errors("reap"):
            pending = self._r.srandmember(f"{self.keys.prefix}:xadv", limit)
            keys = self._r.srandmember(f"{self.keys.prefix}:xpk", limit)
        reaped: list[ReapedJob] = []
        for eid in pending:
            reaped += self._advance(eid.decode(), now)
        for ck in keys:
            self._promote(ck.decode(), now)
        return reaped

    # ------------------------------------------------------------------ operations

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.flows.storage.SupportsFlows.start_execution`."""
        from backends.redis.flow_names import E, decide

        t = self._flow_now(now)
        ck = new.conc_key
        fields = start_fields(new)
        unmet = unmet_fields(start_index(new))
        jobs: list[Any] = []
        for j in new.jobs:
            jobs += job_args(j)
        for _ in range(_TRIES):
            cas: list[list[str]] = []
            admission = decide.Admission(E.RUNNING)
            if ck is not None:
                kv, slots, _ = self._key_slots(ck)
                cas = [["k", ck, kv]]
                admission = decide.admit(new.concurrency, slots)
            head, ops, state, finished = start_plan(new, admission.state, t)
            header = {
                "id": new.id,
                "cas": cas,
                "fields": fields + head,
                "flow": new.flow,
                "sh": new.spec_hash,
                "n": len(new.steps),
                "sid": [s.id for s in new.steps],
                "ck": ck or "",
                "un": unmet,
                "active": admission.state is not E.SKIPPED,
                "ops": ops,
            }
            res = self._run_flow(
                self._flow_start, t, [json.dumps(header), new.input, new.spec_json, *jobs]
            )
            if res[0] == b"retry":
                continue
            if res[0] == b"dup":
                raise StorageError(f"execution id {new.id!r} already exists")
            if finished and ck is not None:
                self._promote(ck, t)
            return state
        raise StorageError(f"start_execution {new.id}: too much contention on key {ck!r}")

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.flows.storage.SupportsFlows.cancel_execution`."""
        from backends.redis.flow_names import decide

        t = self._flow_now(now)
        state, _ = self._change(execution_id, t, lambda v: decide.cancel(v, t))
        if state is None:
            if self.get_execution(execution_id) is None:
                raise NotFound(f"no flow execution with id {execution_id!r}")
            raise StorageError(f"cancel_execution {execution_id}: too much contention")
        return state

    def _records(self, ids: Sequence[str]) -> list[ExecutionRecord]:
        names = [*EXEC_FIELDS, "in"]
        with translate_errors("get_execution"):
            pipe = self._r.pipeline(transaction=False)
            for eid in ids:
                pipe.hmget(self._x("x", eid), names)
            rows = pipe.execute() if ids else []
            found = [
                (eid, dict(zip(names, row, strict=True)))
                for eid, row in zip(ids, rows, strict=True)
                if row[0] is not None
            ]
            hashes = list(dict.fromkeys(text(f["sh"]) or "" for _, f in found))
            specs = (
                dict(zip(hashes, self._r.mget([self._x("fs", h) for h in hashes]), strict=True))
                if hashes
                else {}
            )
        return [execution_record(eid, f, specs[text(f["sh"]) or ""]) for eid, f in found]

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.flows.storage.SupportsFlows.get_execution`."""
        found = self._records([execution_id])
        return found[0] if found else None

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.flows.storage.SupportsFlows.list_executions`. A filter by
        state scans the (flow's) executions from the newest until the page is full."""
        key = f"{self.keys.prefix}:xl" if flow is None else self._x("xl", flow)
        limit, skip = max(limit, 0), max(offset, 0)
        out: list[ExecutionRecord] = []
        if limit == 0:
            return out
        if state is None:
            with translate_errors("list_executions"):
                ids = self._r.zrevrange(key, skip, skip + limit - 1)
            return self._records([i.decode() for i in ids])
        start, batch = 0, 200
        while len(out) < limit:
            with translate_errors("list_executions"):
                ids = self._r.zrevrange(key, start, start + batch - 1)
            if not ids:
                break
            start += batch
            for rec in self._records([i.decode() for i in ids]):
                if rec.state is not state:
                    continue
                if skip:
                    skip -= 1
                elif len(out) < limit:
                    out.append(rec)
        return out

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.flows.storage.SupportsFlows.list_steps`."""
        from backends.redis.flow_names import StepRecord, step_job_id

        x, _ = self._read_exec(execution_id)
        if x is None:
            return []
        return [
            StepRecord(
                execution_id=execution_id,
                idx=i,
                step_id=sid,
                state=st,
                reason=reason,
                job_id=step_job_id(execution_id, i) if released else None,
                depends_on=deps,
            )
            for i, ((sid, deps), (st, released, reason)) in enumerate(
                zip(x.steps, x.states, strict=True)
            )
        ]

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.flows.storage.SupportsFlows.get_step_inputs`."""
        from backends.redis.flow_names import StepInputs

        with translate_errors("get_step_inputs"):
            inp, sp = self._r.hmget(self._x("x", execution_id), ["in", "sp"])
        if sp is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        index = index_of(sp)
        if step_id not in index.pos:
            raise NotFound(f"execution {execution_id} has no step {step_id!r}")
        deps = index.depends_on[index.pos[step_id]]
        got: list[bytes | None] = []
        if deps:  # only the dependencies' results (a step's inputs, not the execution's)
            with translate_errors("get_step_inputs"):
                got = self._r.hmget(self._x("xo", execution_id), [str(index.pos[d]) for d in deps])
        return StepInputs(input=inp or b"", results=dict(zip(deps, got, strict=True)))

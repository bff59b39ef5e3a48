"""Flow executions on SQLite and PostgreSQL (:class:`~queue_core.storage.abilities.SupportsFlows`).

Every change to an execution is one transaction with the event that caused it: a step
job's end (``finish``, ``reap``, ``cancel``: the jobs parts call :meth:`Flows.ended`
in their transaction), the deadline (``reap``), ``cancel_execution``, ``start_execution``.
The transaction locks the execution (:meth:`Flows.open`: its concurrency key, then its
row), reads what the decision needs, lets the core decide and plan
(:mod:`queue_core.rules.flows.plan`), and applies the plan's operations with one
interpreter (:meth:`Flows._apply`); no rule is re-derived here.

A step end is decided by :func:`~queue_core.rules.flows.plan.step_end` from the execution's
row and counters (``n_succeeded``; ``n_bad``, the steps in an
:data:`~queue_core.rules.flows.decide_fast.OFF_FAST_PATH` state), the ended step's row and
its dependents' rows with their ``unmet`` counters: O(dependents) rows. Only when the
fast rule does not apply does it ask for the whole execution (:meth:`Flows._view`, which
also locks the execution's active step jobs, in id order). The step rows read are kept
for the transaction with the plan's changes, and written once each (:meth:`Flows._flush`),
so the ends of one ``finish`` batch cost one write per row however many they are.

A released step's stored state stays ``queued`` while its job is queued or running; the
whole-execution view reads ``running`` from the job row, so ``claim`` writes nothing more.
Executions started before schema version 10 have NULL counters: always judged whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from backends.sql.flow_open import (
    Open,
    StepEnd,
    StepRow,
    dependents_of,
    is_sub,
    step_row,
    touched_rows,
)
from backends.sql.flow_reads import index_of, reason_of, remember_index
from backends.sql.limits import Limits, mark
from backends.sql.records import Row, job_row
from backends.sql.store import Store
from backends.sql.workflow_rows import WorkflowRows, job_json
from queue_core.records.errors import NotFound
from queue_core.records.flows import ExecutionState, StepState
from queue_core.records.jobs import JobState, NewJob, ReapedJob
from queue_core.records.workflows import Suspension
from queue_core.rules.flows import decide, plan, workflow
from queue_core.rules.flows.decide import (
    WORKFLOW,
    Admission,
    ExecutionSlot,
    ExecutionView,
    StepView,
)
from queue_core.rules.flows.decide_fast import (
    OFF_FAST_PATH,
    advance_idle,
    step_index,
)
from queue_core.rules.flows.spec import ConcurrencySpec
from queue_core.storage.flows import NewExecution, step_job_id
from queue_core.storage.workflows import sub_execution_id

__all__ = ["Flows"]

_S, _E = StepState, ExecutionState
_OFF = frozenset(OFF_FAST_PATH)
_LONE_MAX = 10_000  # executions Flows._lone remembers before it starts over


class Flows:
    """:class:`~queue_core.storage.abilities.SupportsFlows` and the flow events of the
    jobs parts, on ``store``."""

    def __init__(self, store: Store, limits: Limits) -> None:
        self.store = store
        self.q = store.q
        self.rows = WorkflowRows(store, limits)
        self._lone: set[str] = set()  # executions with no key and no parent (_remember_lone)

    # ------------------------------------------------------------------ reading

    def open(
        self,
        cur: Any,
        eid: str,
        t: int | None,
        *,
        key_held: bool = False,
        jobs: bool = False,
        parent: Open | None = None,
    ) -> Open | None:
        """Lock execution ``eid`` (a sub-execution's parent first, unless given as
        ``parent``; then its concurrency key unless held, then its row: the first locks
        of every flow transaction; with ``jobs`` its active step jobs too, for a caller
        that locks one of them next); ``None``: no such execution. ``t``: the time, or
        ``None``: the storage's clock (PostgreSQL: read with the first statement)."""
        q, locking = self.q, self.store.dialect.locking
        if locking and eid not in self._lone:
            row = cur.execute(q["flow_conc_key_of"], {"e": eid, "now": t}).fetchone()
            if row is None:
                return None
            t = row["now_ms"]
            if row["parent_id"] is not None and parent is None:
                parent = self.open(cur, row["parent_id"], t)
            if not key_held and row["conc_key"] is not None:
                self.store.lock_key(cur, row["conc_key"], flows=True)
            if row["parent_id"] is None and row["conc_key"] is None:
                self._remember_lone(eid)
        found = cur.execute(q["flow_lock_execution"], {"e": eid, "now": t}).fetchone()
        if found is None:
            return None
        if t is None:
            t = found["now_ms"]
            t = t if t is not None else self.store.resolve_now(cur, None)
        head = {k: found[k] for k in found.keys()}
        if not locking and head["parent_id"] is not None and parent is None:
            parent = self.open(cur, head["parent_id"], t)
        x = Open(cur, head, index_of(cur, self.q, head), t, parent)
        if jobs:
            self._lock_jobs(x)
        return x

    def _remember_lone(self, eid: str) -> None:
        """``eid`` has no concurrency key and no parent (fixed at its start): :meth:`open`
        locks its row at once, without the read that finds what to lock first."""
        if len(self._lone) >= _LONE_MAX:
            self._lone.clear()
        self._lone.add(eid)

    def _lock_jobs(self, x: Open) -> None:
        """Lock the execution's queued and running step jobs, in id order (PostgreSQL)."""
        if self.store.dialect.locking and not x.jobs_locked:
            x.cur.execute(self.q["flow_lock_jobs"], {"e": x.id})
        x.jobs_locked = True

    def preload(self, x: Open, ends: Sequence[tuple[str, str]]) -> None:
        """Ask now for the step rows :meth:`ended` will read for ``ends`` (step id, end
        state), as if every end took: in a pipelined transaction (PostgreSQL) the read
        goes with the caller's next statement and is read by :meth:`_load` (one round
        trip less); elsewhere it is read at once. The step rows are not what the ends'
        own statement writes, so the order does not change what is read."""
        self._load(x, _touched(x, ends), len(ends), ahead=self.store.dialect.pipelined(x.cur))

    def _load(self, x: Open, idxs: Iterable[int], ends: int, *, ahead: bool = False) -> None:
        """Read the rows of steps ``idxs`` not read yet (one statement), with the stored
        job of each pending one that ``ends`` step ends may release (for :meth:`_release`);
        ``ahead``: only send the statement (on a cursor of its own, read by the next
        call)."""
        if x.pending is not None:  # asked ahead
            cur, x.pending = x.pending, None
            self._keep(x, cur.fetchall())
            cur.close()
        missing = sorted({i for i in idxs if i not in x.steps})
        if not missing or x.whole:
            return
        params = {"e": x.id, "idxs": self.store.array(missing), "k": ends}
        if ahead:
            x.pending = x.cur.connection.cursor()
            x.pending.execute(self.q["flow_step_rows"], params)
        else:
            self._keep(x, x.cur.execute(self.q["flow_step_rows"], params).fetchall())

    def _keep(self, x: Open, rows: Iterable[Row]) -> None:
        """Step rows read by :meth:`_load`."""
        for r in rows:
            if r["idx"] not in x.steps:
                x.steps[r["idx"]] = step_row(x, r)
            if r["job"] is not None and r["idx"] not in x.stored:
                x.stored[r["idx"]] = r

    def _view(self, x: Open) -> ExecutionView:
        """The whole execution; read (its active step jobs locked first) unless it is."""
        if not x.whole:
            self._flush(x)
            self._lock_jobs(x)
            for r in x.cur.execute(self.q["flow_steps"], {"e": x.id}).fetchall():
                x.steps[r["idx"]] = step_row(x, r)
                x.steps[r["idx"]].running = r["state"] == "queued" and r["job_state"] == "running"
            x.whole = True
        h, ids, deps = x.head, x.index.ids, x.index.depends_on
        steps = tuple(
            StepView(ids[i], _S.RUNNING if s.running else s.state, deps[i])
            for i, s in sorted(x.steps.items())
        )
        return ExecutionView(
            state=_E(h["state"]), steps=steps, max_parallel=h["max_parallel"],
            timeout_ms=h["timeout_ms"], deadline_at=h["deadline_at"],
            reason=reason_of(h["reason"]), failed_step=h["failed_step"], kind=h["kind"] or "flow",
            awaiting=tuple(ids[i] for i in json.loads(h["awaiting"] or "[]")),
        )  # fmt: skip

    # ------------------------------------------------------------------ events

    def ended(self, x: Open, ends: Sequence[StepEnd]) -> list[ReapedJob]:
        """Step jobs of ``x`` changed in this transaction (ended, or queued for a retry):
        each decided by :func:`plan.step_end` and applied, in order; the jobs the
        decisions timed out."""
        index, pos = x.index, x.index.pos
        self._load(x, _touched(x, [(sid, state) for sid, state, _ in ends]), len(ends))
        reaped: list[ReapedJob] = []
        for sid, value, why in ends:
            i, state = pos[sid], _S(value)
            _, ops = plan.step_end(
                x.head_view(), index, x.counts(), sid, x.steps[i].state, state,
                partial(dependents_of, x, i), partial(self._view, x), x.t, why,
            )  # fmt: skip
            reaped += self._apply(x, ops)
        return reaped + self._flush(x)

    def suspended(self, x: Open, suspension: Suspension) -> list[ReapedJob]:
        """A workflow's function step was suspended (``finish`` of a ``SuspendedEnd``, its
        job queued again): :func:`workflow.suspend_ops`, with the first stored event its
        wait receives (:func:`workflow.first_delivery`)."""
        view, wait, event = self._view(x), suspension.wait, None
        if wait is not None:
            events = self.rows.events(x.cur, wait.name, x.t)
            event = workflow.first_delivery(wait, events, x.t)
        ops = workflow.suspend_ops(view, x.index, suspension, x.t, event)
        return self._apply(x, ops) + self._flush(x)

    def claimed(self, eid: str, step_id: str, now: int | None) -> None:
        """A workflow's function step was claimed: :func:`plan.claim_ops` (a ``waiting``
        execution is ``running`` again). Its ``SetStep`` is not written: a released
        step's stored state stays ``queued`` and the view reads ``running`` from its job."""
        with self.store.tx() as cur:
            x = self.open(cur, eid, self.store.resolve_now(cur, now))
            if x is None or not x.workflow or step_id not in x.index.pos:
                return
            ops = plan.claim_ops(x.index, step_id, x.head_view())
            self._apply(x, [op for op in ops if not isinstance(op, plan.SetStep)])
            self._flush(x)

    def commute(self, x: Open, states: Iterable[str]) -> bool:
        """Whether step jobs of ``x`` ending in ``states`` may be fenced together before
        they are decided: all succeed or retry and the execution is one the fast rule
        judges (:func:`~queue_core.rules.flows.decide_fast.advance_idle`), so no decision
        among them ends or changes another step's job."""
        if x.workflow:
            return False
        counts = x.counts()
        idle = advance_idle(x.head_view(), counts, len(x.index.ids), x.t)
        return (
            idle
            and x.head["state"] == "running"
            and all(s in ("succeeded", "queued") for s in states)
        )

    def advance(self, eid: str, t: int) -> list[ReapedJob]:
        """The reaper's look at an execution past its deadline: :func:`decide.advance`."""
        return self._judge(eid, t, decide.advance)[1]

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.cancel_execution`."""
        state, _ = self._judge(execution_id, now, decide.cancel)
        if state is None:
            raise NotFound(f"no flow execution with id {execution_id!r}")
        return state

    def _judge(
        self, eid: str, now: int | None, rule: Callable[[ExecutionView, int], decide.Transition]
    ) -> tuple[ExecutionState | None, list[ReapedJob]]:
        """``rule`` on the whole execution, applied when it changes anything (one
        transaction); (its state, ``None``: no such execution; the jobs it timed out)."""
        with self.store.tx() as cur:
            x = self.open(cur, eid, self.store.resolve_now(cur, now))
            if x is None:
                return None, []
            view = self._view(x)
            tr = rule(view, x.t)
            if not tr.changes(view):
                return tr.state, []
            reaped = self._apply(x, plan.ops(tr, x.index, _prior(view))) + self._flush(x)
            self.store.notify(cur)
            return tr.state, reaped

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.start_execution`: stored
        ``queued`` with every step ``pending``, then the plan of its admission
        (:func:`decide.admit`, :func:`plan.start_ops`) applied, in one transaction."""
        with self.store.tx() as cur:
            return self.start(cur, new, self.store.resolve_now(cur, now))

    def start(
        self, cur: Any, new: NewExecution, t: int, parent: Open | None = None
    ) -> ExecutionState:
        """:meth:`start_execution` in the caller's transaction (a sub-execution's
        ``parent`` is locked already)."""
        store, q = self.store, self.q
        others: list[ExecutionSlot] = []
        if new.conc_key is not None:
            store.lock_key(cur, new.conc_key, flows=True)
            others = self.slots(cur, new.conc_key)
        admission = decide.admit(new.concurrency, others)
        conc = new.concurrency
        for old in admission.supersede:  # SPEC §13: before the new one is stored
            assert conc is not None
            self._supersede(cur, old, conc.behavior, t)
        cur.execute(q["flow_insert_spec"], {"hash": new.spec_hash, "body": new.spec_json})
        cur.execute(q["flow_insert_execution"], {
            "id": new.id, "flow": new.flow, "conc_key": new.conc_key,
            "conc_limit": conc.limit if conc else None,
            "conc_skip": conc.behavior == "skip" if conc else None,
            "spec_hash": new.spec_hash, "input": new.input,
            "max_parallel": new.max_parallel, "timeout_ms": new.timeout_ms, "now": t,
            "kind": new.kind if new.kind == WORKFLOW else None,
            "parent_id": new.parent_id, "parent_idx": new.parent_idx,
        })  # fmt: skip
        index = plan.index_of(new.steps)
        cur.executemany(q["flow_insert_step"], [
            {"e": new.id, "idx": i, "step_id": s.id, "deps": json.dumps(list(s.depends_on)),
             "job": job_json(j), "payload": j.payload, "unmet": index.unmet[i]}
            for i, (s, j) in enumerate(zip(new.steps, new.jobs, strict=True))
        ])  # fmt: skip
        if new.kind != WORKFLOW:
            remember_index(new.spec_hash, index)
        x = self.open(cur, new.id, t, key_held=True, parent=parent)
        assert x is not None
        x.steps = {i: StepRow(_S.PENDING, None, n) for i, n in enumerate(x.index.unmet)}
        x.whole = True
        self._apply(x, plan.start_ops(self._view(x), x.index, admission, t))
        self._flush(x)
        return admission.state

    def _supersede(self, cur: Any, eid: str, behavior: str, t: int) -> None:
        """A newer execution of the same key takes ``eid``'s place (its key's lock is
        held): :func:`plan.supersede_ops` applied."""
        y = self.open(cur, eid, t, key_held=True, jobs=True)
        if y is not None:
            self._apply(y, plan.supersede_ops(self._view(y), y.index, behavior, t)[1])
            self._flush(y)
            self.store.notify(cur)

    def slots(self, cur: Any, key: str) -> list[ExecutionSlot]:
        """The active executions of concurrency key ``key``, oldest first."""
        rows = cur.execute(self.q["flow_active_of_key"], {"key": key}).fetchall()
        return [ExecutionSlot(r["id"], _E(r["state"]), r["created_at"]) for r in rows]

    # ------------------------------------------------------------------ applying

    def apply(self, x: Open, ops: Sequence[plan.Op]) -> list[ReapedJob]:
        """Apply ``ops`` to ``x`` and write them; the jobs they timed out."""
        reaped = self._apply(x, ops) + self._flush(x)
        self.store.notify(x.cur)
        return reaped

    def view(self, x: Open) -> ExecutionView:
        """The whole execution (:meth:`_view`)."""
        return self._view(x)

    def _apply(self, x: Open, ops: Sequence[plan.Op]) -> list[ReapedJob]:
        """Interpret ``ops`` (in order): step rows and the execution's fields change in
        ``x`` (written by :meth:`_flush`), the step jobs' changes and a workflow's rows
        (:meth:`_workflow_op`) now."""
        reaped: list[ReapedJob] = []
        for op in ops:
            if isinstance(op, plan.SetStep):
                s = x.steps[op.idx]
                x.ds += (op.state is _S.SUCCEEDED) - (op.was is _S.SUCCEEDED)
                x.db += (op.state in _OFF) - (op.was in _OFF)
                s.state, s.reason, s.running, s.dirty = op.state, op.reason, False, True
                for d in op.dependents:
                    dep = x.steps[d]
                    dep.lowered, dep.dirty = dep.lowered + 1, True
                    dep.unmet = None if dep.unmet is None else dep.unmet - 1
            elif isinstance(op, plan.SetExecution):
                x.head.update(
                    state=op.state.value, reason=op.reason.value if op.reason else None,
                    failed_step=op.failed_step, deadline_at=op.deadline_at,
                )  # fmt: skip
                x.changed, x.seen = True, None
            elif isinstance(op, plan.Started):
                x.started = True
            elif isinstance(op, plan.Finished):
                x.finished = True
            elif isinstance(op, (plan.EndJob, plan.RequestCancel)) and is_sub(x, op.idx):
                reaped += self._cancel_sub(x, op.idx)
            elif isinstance(op, plan.EndJob):
                reaped += self._end_job(x, op)
            elif isinstance(op, plan.RequestCancel):
                x.cur.execute(self.q["flow_cancel_job"], {"id": step_job_id(x.id, op.idx)})
            elif isinstance(op, plan.Release):
                x.releases.append(op)
            else:
                self._workflow_op(x, op)
        if x.skipped:  # a child stored skipped ends its step at once
            ends, x.skipped = x.skipped, []
            reaped += self.ended(x, ends)
        return reaped

    def _workflow_op(self, x: Open, op: plan.Op) -> None:
        """The operations workflows and resumes add (:class:`WorkflowRows` writes them)."""
        rows, cur, t = self.rows, x.cur, x.t
        if isinstance(op, (plan.SetReady, plan.Wake)):
            at = op.at if isinstance(op, plan.SetReady) else t
            rows.set_ready(cur, step_job_id(x.id, op.idx), at, wake=at <= t)
        elif isinstance(op, plan.PutMemo):
            rows.put_memo(cur, x.id, op, t)
        elif isinstance(op, plan.DropMemos):
            rows.drop_memos(cur, x.id, op.keys)
        elif isinstance(op, plan.AddStep):
            skipped = rows.add_step(cur, x.id, op, t)
            x.steps[op.idx] = StepRow(op.state, None, 0, sub=op.job is None)
            if skipped is not None:
                x.skipped.append((op.step, JobState.SKIPPED.value, skipped))
            i = x.index
            x.index = step_index([*zip(i.ids, i.depends_on, strict=True), (op.step, ())])
        elif isinstance(op, plan.SetAwaiting):
            x.head["awaiting"] = json.dumps(list(op.idxs)) if op.idxs else None
            x.changed = True
        elif isinstance(op, plan.AddWaiter):
            rows.add_waiter(cur, x.id, op.wait)
        elif isinstance(op, plan.DropWaiter):
            rows.drop_waiter(cur, x.id, op.memo_key)
        elif isinstance(op, plan.Reopened):
            rows.reopen(cur, x.id)
        elif isinstance(op, plan.SetUnmet):
            rows.set_unmet(cur, x.id, op)
            step = x.steps[op.idx]
            step.unmet, step.lowered = op.unmet, 0
        else:
            raise AssertionError(f"unknown plan operation {op!r}")

    def _cancel_sub(self, x: Open, idx: int) -> list[ReapedJob]:
        """``EndJob`` / ``RequestCancel`` of a step standing for a sub-execution: that
        execution is cancelled (:func:`decide.cancel`, applied)."""
        y = self.open(x.cur, sub_execution_id(x.id, idx), x.t, parent=x)
        if y is None:
            return []
        view = self._view(y)
        tr = decide.cancel(view, x.t)
        if not tr.changes(view):
            return []
        return self._apply(y, plan.ops(tr, y.index, _prior(view))) + self._flush(y)

    def _end_job(self, x: Open, op: plan.EndJob) -> list[ReapedJob]:
        """A step's job, if still ``op.when``, ends; a running one's attempt is recorded
        (the lease is cleared: the worker's later finish is refused)."""
        job_id = step_job_id(x.id, op.idx)
        params = {"id": job_id, "was": op.when.value, "state": op.state.value,
                  "reason": op.reason, "now": x.t}  # fmt: skip
        row = x.cur.execute(self.q["flow_end_job"], params).fetchone()
        if row is None or op.outcome is None:
            return []
        attempt = {"job_id": job_id, "number": row["attempt"], "now": x.t,
                   "outcome": op.outcome.value, "reason": op.reason}  # fmt: skip
        x.cur.execute(self.q["end_attempt"], attempt)
        return [ReapedJob(job_id=job_id, attempt=row["attempt"], outcome=op.outcome,
                          reason=op.reason, state=JobState(op.state))]  # fmt: skip

    def _flush(self, x: Open) -> list[ReapedJob]:
        """Write what :meth:`_apply` kept: the execution's row, each changed step row once,
        the released steps' jobs; then, if it finished, its waits go, its place is
        promoted (a concurrency key) and, as a sub-execution, its parent's step ends."""
        cur, q, h, t = x.cur, self.q, x.head, x.t
        if x.changed or x.ds or x.db or x.started or x.finished:
            cur.execute(q["flow_update_execution"], {
                "e": x.id, "state": h["state"], "reason": h["reason"],
                "failed_step": h["failed_step"], "deadline_at": h["deadline_at"],
                "started_at": t if x.started else None, "finished_at": t if x.finished else None,
                "ds": x.ds, "db": x.db, "awaiting": h["awaiting"],
            })  # fmt: skip
            for name, delta in (("n_succeeded", x.ds), ("n_bad", x.db)):
                h[name] = None if h[name] is None else h[name] + delta
        rows = [
            {"e": x.id, "idx": i, "state": s.state.value, "reason": s.reason,
             "lowered": s.lowered,
             "job_id": step_job_id(x.id, i) if s.state is _S.QUEUED and not s.sub else None}
            for i, s in x.steps.items() if s.dirty
        ]  # fmt: skip
        for s in x.steps.values():
            s.dirty, s.lowered = False, 0
        if x.releases:
            self._release(x)
        if rows:
            self.store.dialect.many(cur, "flow_update_step", rows)
        finished = x.finished
        x.ds = x.db = 0
        x.changed = x.started = x.finished = False
        if not finished:
            return []
        if x.workflow:
            self.rows.drop_waiter(cur, x.id)
        reaped = self._promote(x) if h["conc_key"] is not None else []
        return reaped + self._parent_step_end(x)

    def _parent_step_end(self, x: Open) -> list[ReapedJob]:
        """A finished sub-execution ends its parent's step (as a child job's end)."""
        p, idx = x.parent, x.head["parent_idx"]
        if p is None or idx is None or idx >= len(p.index.ids):
            return []
        state = workflow.sub_step_state(_E(x.head["state"]))
        return self.ended(p, [(p.index.ids[idx], state.value, x.head["reason"])])

    def _release(self, x: Open) -> None:
        """Enqueue the stored jobs of the released steps (deadline: the execution's); a
        step whose job was released before and finished (a resumed step) runs it again."""
        deadline = {op.idx: op.deadline_at for op in x.releases}
        rest = sorted(i for i in deadline if i not in x.stored)  # not read by _load
        found = [x.stored.pop(i) for i in sorted(deadline) if i in x.stored]
        if rest:
            params = {"e": x.id, "idxs": self.store.array(rest)}
            found += x.cur.execute(self.q["flow_step_jobs"], params).fetchall()
        jobs = [(NewJob(payload=bytes(r["payload"]), **json.loads(r["job"])), r["idx"])
                for r in found]  # fmt: skip
        self.store.dialect.many(x.cur, "flow_insert_job", [
            job_row(j, x.t) + (j.execution_id, j.step_id, deadline[i]) for j, i in jobs
        ])  # fmt: skip
        for j, _ in jobs:  # a round_robin flow's steps take turns (SPEC §13)
            mark(x.cur, self.store, j)
        again = [(j, deadline[i]) for (j, i), r in zip(jobs, found, strict=True) if r["job_id"]]
        if again:
            self.rows.rerun(x.cur, again, x.t)
        x.releases = []
        self.store.notify(x.cur)

    def _promote(self, x: Open) -> list[ReapedJob]:
        """Start the queued executions of ``x``'s key that now have a place (the key's
        lock is held: every transaction on a keyed execution takes it first)."""
        h = x.head
        conc = ConcurrencySpec(h["conc_limit"], "skip" if h["conc_skip"] else "queue")
        reaped: list[ReapedJob] = []
        for eid in decide.promote(conc, self.slots(x.cur, h["conc_key"])):
            y = self.open(x.cur, eid, x.t, key_held=True)
            if y is not None:
                admitted = Admission(_E.RUNNING)
                reaped += self._apply(y, plan.start_ops(self._view(y), y.index, admitted, x.t))
                reaped += self._flush(y)
        return reaped


def _touched(x: Open, ends: Iterable[tuple[str, str]]) -> list[int]:
    """The step rows the fast decisions of ``ends`` (step id, end state) read."""
    pos = x.index.pos
    return [j for sid, state in ends for j in touched_rows(x.index, pos[sid], state)]


def _prior(view: ExecutionView) -> Callable[[str], StepState]:
    return {s.id: s.state for s in view.steps}.__getitem__

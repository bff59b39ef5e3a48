"""Flow executions on SQLite and PostgreSQL (:class:`~queue_core.flows.storage.SupportsFlows`).

Every change to an execution is one transaction holding the event that caused it: a step
job's end (``finish``, ``reap``, ``cancel``), the deadline (``reap``), ``cancel_execution``,
``start_execution``. The transaction reads the execution's
:class:`~queue_core.flows.decide.ExecutionView`, calls a function of
:mod:`queue_core.flows.decide`, and applies the returned
:class:`~queue_core.flows.decide.Transition` in the order of the design
(``docs/design/flows-storage.md`` §3) before it commits; no rule is re-derived here.

Lock order, everywhere (design §4.2): the execution's concurrency key (PostgreSQL
advisory lock; only executions with concurrency), the execution row, its active step jobs
(``FOR UPDATE`` in id order), then the rows the transition changes. On SQLite the write
lock serializes every transaction. The plain reaper scans skip step jobs
(``execution_id IS NULL``); a step job's end is routed here by its id
(``<execution>.<idx>``, :func:`~queue_core.flows.storage.step_job_id`), so plain jobs pay
nothing. A released step's stored state stays ``queued`` while its job is queued or
running; the view reads ``running`` from the job row, so ``claim`` writes nothing more.
Tables: :mod:`backends.sql.flow_schema`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, NamedTuple

from backends.sql.base import Grave
from backends.sql.flow_fast import FastStepEnd, changes
from backends.sql.records import Row, end_values, job_row
from queue_core.errors import NotFound
from queue_core.model import AttemptEnd, JobState, NewJob, Outcome, ReapedJob, Reason

if TYPE_CHECKING:  # at run time from backends.sql.flow_names, on a first flow operation
    from queue_core.flows import decide
    from queue_core.flows.decide import ExecutionView, StepView, Transition
    from queue_core.flows.model import ExecutionReason, ExecutionState, StepState
    from queue_core.flows.storage import ExecutionRecord, NewExecution, StepRecord

__all__ = ["SQLFlows"]

_JOB_FIELDS = tuple(f.name for f in fields(NewJob) if f.name != "payload")
_CACHE_MAX = 4096
_deps_cache: dict[str, list[tuple[str, tuple[str, ...], dict[StepState, StepView]]]] = {}
"""``(step id, dependencies, its StepView by state)`` of each step by execution id
(immutable: read once per process; a view is built once per step and state)."""
_spec_cache: dict[str, str] = {}
"""Spec JSON by content hash (immutable)."""


def _remember(cache: dict[str, Any], key: str, value: Any) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value


def _job_json(j: NewJob) -> str:
    return json.dumps({name: getattr(j, name) for name in _JOB_FIELDS})


def _job_of(text: str, payload: Any) -> NewJob:
    return NewJob(payload=bytes(payload), **json.loads(text))


class _Step(NamedTuple):
    idx: int
    id: str
    state: StepState
    reason: str | None
    job_id: str | None
    deps: tuple[str, ...]
    seen: StepView
    """The step as the decisions see it (one object per step and state, reused)."""


@dataclass(slots=True)
class _Exec:
    """One execution read (and locked) in a transaction."""

    row: dict[str, Any]
    """The execution row, kept up to date by :meth:`SQLFlows._apply`."""
    steps: list[_Step]
    attempts: dict[str, int]
    """Attempt number of each active step job (locked)."""

    @property
    def id(self) -> str:
        return str(self.row["id"])

    def view(self) -> ExecutionView:
        from backends.sql.flow_names import E, ExecutionView, reason_of

        r = self.row
        return ExecutionView(
            state=E(r["state"]),
            steps=tuple([s.seen for s in self.steps]),
            max_parallel=r["max_parallel"],
            timeout_ms=r["timeout_ms"],
            deadline_at=r["deadline_at"],
            reason=reason_of(r["reason"]),
            failed_step=r["failed_step"],
        )

    def changed(self, tr: Transition, rows: list[dict[str, Any]], t: int) -> None:
        """Follow what :meth:`SQLFlows._apply` wrote (the next event of the same
        transaction reads it from here)."""
        from backends.sql.flow_names import STEP_STATES, StepView

        r = self.row
        r["state"], r["reason"] = tr.state.value, _value(tr.reason)
        r["failed_step"], r["deadline_at"] = tr.failed_step, tr.deadline_at
        if tr.started:
            r["started_at"] = t
        if tr.finished:
            r["finished_at"] = t
        cached = _deps_cache.get(self.id)
        for u in rows:
            old = self.steps[u["idx"]]
            state = STEP_STATES[u["state"]]
            views = cached[old.idx][2] if cached is not None else {}
            seen = views.get(state)
            if seen is None:
                seen = views[state] = StepView(old.id, state, old.deps)
            self.steps[u["idx"]] = old._replace(
                state=state, reason=u["reason"], job_id=u["job_id"] or old.job_id, seen=seen
            )

    def step_of_job(self, job_id: str) -> _Step | None:
        return next((s for s in self.steps if s.job_id == job_id), None)


class SQLFlows(FastStepEnd):
    """The flow operations of :class:`~backends.sql.SQLStorage` (its base class)."""

    # ------------------------------------------------------------------ hooks (storage.py)

    def _finish_plain(self, ends: Sequence[AttemptEnd], now: int | None) -> list[bool]:
        raise NotImplementedError

    def _bury(self, cur: Any, graves: list[Grave]) -> None:
        raise NotImplementedError

    def _reap_stale(self, cur: Any, rows: list[Row]) -> tuple[list[ReapedJob], bool]:
        raise NotImplementedError

    def _expire_unstarted(self, cur: Any, rows: list[Row]) -> list[ReapedJob]:
        raise NotImplementedError

    # ------------------------------------------------------------------ reading one execution

    def _steps(self, cur: Any, eid: str, running: set[str] | None = None) -> list[_Step]:
        """The steps of ``eid`` by index. ``running``: the ids of its running step jobs
        (read under lock by :meth:`_lock`); ``None``: read them with the steps."""
        from backends.sql.flow_names import STEP_STATES, StepView

        if running is None:
            rows = cur.execute(self._q["flow_steps"], {"e": eid}).fetchall()
            running = {r["job_id"] for r in rows if r["job_state"] == "running"}
        else:
            rows = cur.execute(self._q["flow_step_states"], {"e": eid}).fetchall()
        deps = _deps_cache.get(eid)
        if deps is None or len(deps) != len(rows):
            found = cur.execute(self._q["flow_step_deps"], {"e": eid}).fetchall()
            deps = [(r["step_id"], tuple(json.loads(r["deps"])), {}) for r in found]
            _remember(_deps_cache, eid, deps)
        states = STEP_STATES
        out: list[_Step] = []
        for r, (sid, d, views) in zip(rows, deps, strict=True):
            state, reason, job_id = r["state"], r["reason"], r["job_id"]
            if state == "queued" and job_id in running:
                state, reason = "running", None
            st = states[state]
            seen = views.get(st)
            if seen is None:
                seen = views[st] = StepView(sid, st, d)
            out.append(_Step(r["idx"], sid, st, reason, job_id, d, seen))
        return out

    def _lock(self, cur: Any, eid: str, *, key_held: bool = False) -> _Exec | None:
        """Lock and read an execution in the design's order (``None``: unknown id)."""
        row = self._lock_head(cur, eid, key_held=key_held)
        if row is None:
            return None
        jobs = cur.execute(self._q["flow_lock_jobs"], {"e": eid}).fetchall()
        running = {r["id"] for r in jobs if r["state"] == "running"}
        return _Exec(row, self._steps(cur, eid, running), {r["id"]: r["attempt"] for r in jobs})

    # ------------------------------------------------------------------ applying

    def _apply(
        self,
        cur: Any,
        x: _Exec,
        tr: Transition,
        t: int,
        reason: str | None = None,
        result: bytes | None = None,
    ) -> list[ReapedJob]:
        """Apply ``tr`` to ``x`` in the design's order (§3); the step jobs it timed out.
        ``reason``/``result``: of the event's own step end (``tr.ended``)."""
        from backends.sql.flow_names import S

        by_id = {s.id: s for s in x.steps}
        rows: list[dict[str, Any]] = []

        def step(sid: str, state: StepState, why: str | None, **extra: Any) -> None:
            rows.append(
                {
                    "e": x.id,
                    "idx": by_id[sid].idx,
                    "state": state.value,
                    "reason": why,
                    "job_id": extra.get("job_id"),
                    "result": extra.get("result"),
                }
            )

        for sid, state in tr.ended:
            step(sid, state, reason, result=result if state is S.SUCCEEDED else None)
        ds, db, succeeded = changes(tr, lambda sid: by_id[sid].state)
        cur.execute(self._q["flow_update_execution"], {
            "e": x.id, "state": tr.state.value, "reason": _value(tr.reason),
            "failed_step": tr.failed_step, "deadline_at": tr.deadline_at,
            "started_at": t if tr.started else None, "finished_at": t if tr.finished else None,
            "ds": ds, "db": db,
        })  # fmt: skip
        if succeeded:
            self._lower_unmet(cur, x.id, self._index(cur, x.row), succeeded)
        reaped: list[ReapedJob] = []
        for sid in tr.time_out:
            step(sid, S.TIMED_OUT, Reason.FLOW_TIMEOUT.value)
            reaped += self._time_out_job(cur, x, by_id[sid].job_id, t)
        for sid in tr.not_run:
            step(sid, S.NOT_RUN, _value(tr.not_run_reason))
            if by_id[sid].job_id is not None:
                cur.execute(self._q["flow_not_run_job"], {"id": by_id[sid].job_id, "now": t})
        for sid in tr.cancel:
            cur.execute(self._q["flow_cancel_job"], {"id": by_id[sid].job_id})
        if tr.release:
            jobs = self._release(cur, x.id, [by_id[s].idx for s in tr.release], tr.deadline_at, t)
            for sid in tr.release:
                step(sid, S.QUEUED, None, job_id=jobs[by_id[sid].idx])
        if rows:
            cur.executemany(self._q["flow_update_step"], rows)
        x.changed(tr, rows, t)
        if tr.finished and x.row["conc_key"] is not None:
            reaped += self._promote(cur, x.row, t)
        return reaped

    def _time_out_job(self, cur: Any, x: _Exec, job_id: str | None, t: int) -> list[ReapedJob]:
        """A running step job stopped by the deadline: attempt ``timed_out`` /
        ``flow_timeout``, lease cleared (the worker's late finish is refused)."""
        number = x.attempts.get(job_id or "")
        if job_id is None or number is None:
            return []
        cur.execute(self._q["flow_time_out_job"], {"id": job_id, "now": t})
        if cur.rowcount != 1:
            return []
        reason = Reason.FLOW_TIMEOUT.value
        cur.execute(
            self._q["end_attempt"],
            {
                "job_id": job_id,
                "number": number,
                "now": t,
                "outcome": Outcome.TIMED_OUT.value,
                "reason": reason,
            },
        )
        return [
            ReapedJob(
                job_id=job_id,
                attempt=number,
                outcome=Outcome.TIMED_OUT,
                reason=reason,
                state=JobState.TIMED_OUT,
            )
        ]

    def _release(
        self, cur: Any, eid: str, idxs: list[int], deadline: int | None, t: int
    ) -> dict[int, str]:
        """Enqueue the stored jobs of steps ``idxs``; ``{idx: job id}``."""
        rows = cur.execute(self._q["flow_step_jobs"], {"e": eid, "idxs": self._list(idxs)})
        rows = rows.fetchall()
        jobs = {r["idx"]: _job_of(r["job"], r["payload"]) for r in rows}
        cur.executemany(
            self._q["flow_insert_job"],
            [job_row(j, t) + (j.execution_id, j.step_id, deadline) for j in jobs.values()],
        )
        self._notify(cur)
        return {i: j.id for i, j in jobs.items()}

    def _promote(self, cur: Any, row: Row, t: int) -> list[ReapedJob]:
        """Start the queued executions of ``row``'s key that now have a place (the key's
        lock is held: every transaction on a keyed execution takes it first)."""
        from backends.sql.flow_names import ConcurrencySpec, E, ExecutionSlot, decide

        key = row["conc_key"]
        conc = ConcurrencySpec(row["conc_limit"], "skip" if row["conc_skip"] else "queue")
        slots = [
            ExecutionSlot(r["id"], E(r["state"]), r["created_at"])
            for r in cur.execute(self._q["flow_active_of_key"], {"key": key}).fetchall()
        ]
        reaped: list[ReapedJob] = []
        for eid in decide.promote(conc, slots):
            queued = self._lock(cur, eid, key_held=True)
            if queued is not None:
                reaped += self._apply(cur, queued, decide.start(queued.view(), t), t)
        return reaped

    # ------------------------------------------------------------------ events

    def start_execution(self, new: NewExecution, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.flows.storage.SupportsFlows.start_execution`."""
        from backends.sql.flow_names import E, ExecutionSlot, decide

        with self._tx() as cur:
            t = self._resolve_now(cur, now)
            others: list[ExecutionSlot] = []
            if new.conc_key is not None:
                cur.execute(self._q["flow_lock_key"], {"k": new.conc_key})
                rows = cur.execute(self._q["flow_active_of_key"], {"key": new.conc_key})
                others = [
                    ExecutionSlot(r["id"], E(r["state"]), r["created_at"]) for r in rows.fetchall()
                ]
            admission = decide.admit(new.concurrency, others)
            self._insert_execution(cur, new, admission, t)
            if admission.state is E.RUNNING:
                x = self._lock(cur, new.id, key_held=True)
                assert x is not None
                self._apply(cur, x, decide.start(x.view(), t), t)
            return admission.state

    def _insert_execution(
        self, cur: Any, new: NewExecution, admission: decide.Admission, t: int
    ) -> None:
        """Store the spec (if absent), the execution and its steps; an admitted execution
        is stored ``queued`` and started by the caller (``decide.start``)."""
        from backends.sql.flow_names import E, ExecutionReason, S

        skipped = admission.state is E.SKIPPED
        conc = new.concurrency
        cur.execute(self._q["flow_insert_spec"], {"hash": new.spec_hash, "body": new.spec_json})
        cur.execute(self._q["flow_insert_execution"], {
            "id": new.id, "flow": new.flow, "conc_key": new.conc_key,
            "conc_limit": conc.limit if conc else None,
            "conc_skip": conc.behavior == "skip" if conc else None,
            "spec_hash": new.spec_hash, "input": new.input,
            "state": (E.QUEUED if admission.state is E.RUNNING else admission.state).value,
            "reason": _value(admission.reason), "max_parallel": new.max_parallel,
            "timeout_ms": new.timeout_ms, "now": t, "finished_at": t if skipped else None,
            "n_bad": len(new.steps) if skipped else 0,
        })  # fmt: skip
        state = S.NOT_RUN.value if skipped else S.PENDING.value
        why = ExecutionReason.CONCURRENCY_LIMIT.value if skipped else None
        cur.executemany(self._q["flow_insert_step"], [
            {"execution_id": new.id, "idx": i, "step_id": s.id, "state": state, "reason": why,
             "deps": json.dumps(list(s.depends_on)), "job": _job_json(j), "payload": j.payload,
             "unmet": len(set(s.depends_on))}
            for i, (s, j) in enumerate(zip(new.steps, new.jobs, strict=True))
        ])  # fmt: skip

    def cancel_execution(self, execution_id: str, *, now: int | None = None) -> ExecutionState:
        """See :meth:`queue_core.flows.storage.SupportsFlows.cancel_execution`."""
        from backends.sql.flow_names import decide

        with self._tx() as cur:
            t = self._resolve_now(cur, now)
            x = self._lock(cur, execution_id)
            if x is None:
                raise NotFound(f"no flow execution with id {execution_id!r}")
            view = x.view()
            tr = decide.cancel(view, t)
            if tr.changes(view):
                self._apply(cur, x, tr, t)
                self._notify(cur)
            return tr.state

    def _finish_steps(self, ends: Sequence[AttemptEnd], now: int | None) -> list[bool]:
        """``finish`` of a batch naming step jobs: plain ends as usual, then each step's
        end in its own transaction with its execution's decision."""
        dotted = [e.ref.job_id for e in ends if "." in e.ref.job_id]
        with self._stmt() as cur:
            rows = cur.execute(self._q["flow_jobs_of"], {"ids": self._list(dotted)}).fetchall()
        steps = {r["id"]: r["execution_id"] for r in rows if r["execution_id"] is not None}
        plain = [i for i, e in enumerate(ends) if e.ref.job_id not in steps]
        took = [False] * len(ends)
        if plain:
            for i, ok in zip(plain, self._finish_plain([ends[i] for i in plain], now), strict=True):
                took[i] = ok
        by_exec: dict[str, list[int]] = {}
        for i, e in enumerate(ends):
            if e.ref.job_id in steps:
                by_exec.setdefault(steps[e.ref.job_id], []).append(i)
        for eid, idx in by_exec.items():
            for i, ok in zip(idx, self._finish_of(eid, [ends[i] for i in idx], now), strict=True):
                took[i] = ok
        return took

    def _finish_of(self, eid: str, ends: list[AttemptEnd], now: int | None) -> list[bool]:
        """The step ends of one execution in one transaction: each end fenced, then
        ``decide.step_ended`` on the view the previous end left (read once), or the fast
        path (:mod:`backends.sql.flow_fast`) until an end needs the full view."""
        took: list[bool] = []
        with self._tx() as cur:
            t = self._resolve_now(cur, now)
            head = self._lock_head(cur, eid)
            x: _Exec | None = None
            batch = self._fast_batch(cur, head, [end_values(e) for e in ends], t) if head else None
            if batch is not None:
                for job_id in batch[1]:
                    x = x or self._lock(cur, eid, key_held=True)
                    self._step_ended(cur, x, job_id, t)
                ends, took = [], batch[0]
            for e in ends:
                v = end_values(e)
                took.append(v.id in self._finish_batch(cur, [v], t))
                if took[-1] and v.dead_id is not None:
                    self._bury(cur, [(v.id, v.dead_id, v.reason or "", e.error)])
                if not took[-1] or head is None:
                    continue
                if x is None and self._fast_ended(cur, head, v.id, t):
                    continue
                x = x or self._lock(cur, eid, key_held=True)
                self._step_ended(cur, x, v.id, t)
            if any(took):
                self._notify(cur)
        return took

    def _step_ended(self, cur: Any, x: _Exec | None, job_id: str, t: int) -> list[ReapedJob]:
        """After a step job's change in this transaction: ``decide.step_ended`` applied."""
        from backends.sql.flow_names import S, decide

        step = x.step_of_job(job_id) if x is not None else None
        if x is None or step is None:
            return []
        job = cur.execute(self._q["flow_job_state"], {"id": job_id}).fetchone()
        state = S(job["state"])
        tr = decide.step_ended(x.view(), step.id, state, t)
        result = bytes(job["result"]) if job["result"] is not None else None
        return self._apply(cur, x, tr, t, job["reason"], result)

    def _cancel_step(self, job_id: str, now: int | None) -> JobState | None:
        """``cancel`` of a step job (``None``: not a step job, cancel it as any job)."""
        with self._stmt() as cur:
            found = cur.execute(self._q["flow_jobs_of"], {"ids": self._list([job_id])}).fetchone()
        if found is None or found["execution_id"] is None:
            return None
        with self._tx() as cur:
            t = self._resolve_now(cur, now)
            x = self._lock(cur, found["execution_id"])
            row = cur.execute(self._q["flow_job_state"], {"id": job_id}).fetchone()
            state = JobState(row["state"])
            if state is JobState.QUEUED:
                cur.execute(self._q["cancel_queued"], {"seq": row["seq"], "now": t})
                self._step_ended(cur, x, job_id, t)
                self._notify(cur)
                return JobState.CANCELLED
            if state is JobState.RUNNING:
                cur.execute(self._q["request_cancel"], {"seq": row["seq"]})
            return state

    # ------------------------------------------------------------------ reaper and prune

    def _reap_flows(self, now: int | None, limit: int) -> list[ReapedJob]:
        """The flow part of ``reap``: executions past their deadline (no worker needed),
        then lost or overdue step jobs and step jobs past schedule-to-start, each with
        its execution's decision."""
        with self._stmt() as cur:
            t = self._resolve_now(cur, now)
            args = {"now": t, "limit": limit}
            due = [r["id"] for r in cur.execute(self._q["flow_deadlines_due"], args).fetchall()]
            stale = cur.execute(self._q["flow_stale_steps"], args).fetchall()
            sts = cur.execute(self._q["flow_sts_steps"], args).fetchall()
        reaped: list[ReapedJob] = []
        for eid in due:
            reaped += self._advance(eid, t)
        for r in stale:
            reaped += self._reap_step(r["id"], r["execution_id"], t, "flow_stale_one")
        for r in sts:
            reaped += self._reap_step(r["id"], r["execution_id"], t, "flow_sts_one")
        return reaped

    def _advance(self, eid: str, t: int) -> list[ReapedJob]:
        from backends.sql.flow_names import decide

        with self._tx() as cur:
            x = self._lock(cur, eid)
            if x is None:
                return []
            view = x.view()
            tr = decide.advance(view, t)
            if not tr.changes(view):
                return []
            reaped = self._apply(cur, x, tr, t)
            self._notify(cur)
            return reaped

    def _reap_step(self, job_id: str, eid: str, t: int, query: str) -> list[ReapedJob]:
        with self._tx() as cur:
            x = self._lock(cur, eid)
            rows = cur.execute(self._q[query], {"id": job_id, "now": t}).fetchall()
            if query == "flow_stale_one":
                reaped, _ = self._reap_stale(cur, rows)
            else:
                reaped = self._expire_unstarted(cur, rows)
            if reaped:
                reaped += self._step_ended(cur, x, job_id, t)
                self._notify(cur)
            return reaped

    def _prune_executions(self, cur: Any, cutoff: int, limit: int) -> None:
        """``prune``: finished executions (and their steps, and specs no execution uses)
        finished at or before ``cutoff``; their step jobs go with the jobs."""
        rows = cur.execute(self._q["flow_prunable"], {"cutoff": cutoff, "limit": limit})
        rows = rows.fetchall()
        if not rows:
            return
        ids = self._list([r["id"] for r in rows])
        cur.execute(self._q["flow_delete_steps"], {"ids": ids})
        cur.execute(self._q["flow_delete_executions"], {"ids": ids})
        hashes = self._list(sorted({r["spec_hash"] for r in rows}))
        cur.execute(self._q["flow_delete_specs"], {"hashes": hashes})

    # ------------------------------------------------------------------ reads

    def _records(self, cur: Any, rows: list[Row]) -> list[ExecutionRecord]:
        from backends.sql.flow_names import E, ExecutionRecord, reason_of

        missing = sorted({r["spec_hash"] for r in rows} - _spec_cache.keys())
        if missing:
            got = cur.execute(self._q["flow_spec_bodies"], {"hashes": self._list(missing)})
            for s in got.fetchall():
                _remember(_spec_cache, s["hash"], s["body"])
        return [
            ExecutionRecord(
                id=r["id"], flow=r["flow"], state=E(r["state"]), reason=reason_of(r["reason"]),
                failed_step=r["failed_step"], spec_hash=r["spec_hash"],
                spec_json=_spec_cache[r["spec_hash"]], input=bytes(r["input"]),
                max_parallel=r["max_parallel"], timeout_ms=r["timeout_ms"],
                deadline_at=r["deadline_at"], created_at=r["created_at"],
                started_at=r["started_at"], finished_at=r["finished_at"],
                conc_key=r["conc_key"],
            )
            for r in rows
        ]  # fmt: skip

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.flows.storage.SupportsFlows.get_execution`."""
        with self._stmt() as cur:
            rows = cur.execute(self._q["flow_get_execution"], {"e": execution_id}).fetchall()
            return self._records(cur, rows)[0] if rows else None

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.flows.storage.SupportsFlows.list_executions`."""
        from backends.sql.flow_names import E

        params = {
            "flow": flow,
            "state": E(state).value if state is not None else None,
            "limit": max(limit, 0),
            "offset": max(offset, 0),
        }
        with self._stmt() as cur:
            rows = cur.execute(self._q["flow_list_executions"], params).fetchall()
            return self._records(cur, rows)

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.flows.storage.SupportsFlows.list_steps`."""
        from backends.sql.flow_names import StepRecord

        with self._stmt() as cur:
            steps = self._steps(cur, execution_id)
        return [
            StepRecord(
                execution_id=execution_id,
                idx=s.idx,
                step_id=s.id,
                state=s.state,
                reason=s.reason,
                job_id=s.job_id,
                depends_on=s.deps,
            )
            for s in steps
        ]


def _value(reason: ExecutionReason | None) -> str | None:
    return reason.value if reason is not None else None

"""The fast step end of a SQL flow execution: O(dependents) rows per step end.

:class:`backends.sql.flows.SQLFlows` decides a step end on the full
:class:`~queue_core.flows.decide.ExecutionView` (every step row read), which makes a wide
execution cost O(steps) per step end. The common end (a step of a ``running`` execution
without ``max_parallel`` succeeds or waits for a retry, nothing failed, deadline not
passed) is decided here by :func:`queue_core.flows.decide_fast.step_ended_fast`, as the
Redis backend does (``backends/redis/flow_fast.py``), from:

- the execution row (locked first, as every flow transaction does) and its counters
  ``n_succeeded`` / ``n_bad`` (steps succeeded / in a state that ends the fast path);
- the ended step's row and its dependents' rows with their ``unmet`` counters
  (dependencies not succeeded yet);
- the spec's :class:`~queue_core.flows.decide_fast.StepIndex`, built once per spec hash.

Every transaction that writes a step state keeps the counters (:func:`changes`, used by
the full path's ``_apply`` too), so they hold whichever path decided the previous event.
An execution started before schema version 10 has NULL counters and is always decided on
the full view. Any case :func:`step_ended_fast` does not cover returns ``False`` and the
caller decides on the full view, in the same transaction, as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from backends.sql.base import SQLBase
from backends.sql.records import EndRow, Row
from queue_core.errors import NotFound
from queue_core.model import ReapedJob

if TYPE_CHECKING:  # at run time from backends.sql.flow_names, on a first flow operation
    from queue_core.flows.decide import Transition
    from queue_core.flows.decide_fast import ExecutionHead, StepIndex
    from queue_core.flows.model import StepState
    from queue_core.flows.storage import StepInputs

__all__ = ["FastStepEnd", "changes"]

_CACHE_MAX = 1024
_indexes: dict[str, StepIndex] = {}
"""The :class:`StepIndex` of each spec by its hash (immutable)."""


def changes(tr: Transition, old: Callable[[str], StepState]) -> tuple[int, int, list[str]]:
    """What ``tr`` does to the counters: the change of ``n_succeeded``, of ``n_bad``, and
    the steps it makes succeed (their dependents' ``unmet`` goes down by one).

    ``old`` gives a step's state before ``tr``. Writes are taken in the order ``_apply``
    makes them (ended, timed out, not run, released).
    """
    from backends.sql.flow_names import BAD, S

    seq: list[tuple[str, StepState]] = list(tr.ended)
    seq += [(s, S.TIMED_OUT) for s in tr.time_out]
    seq += [(s, S.NOT_RUN) for s in tr.not_run]
    seq += [(s, S.QUEUED) for s in tr.release]
    now: dict[str, StepState] = {}
    ds = db = 0
    succeeded: list[str] = []
    for sid, new in seq:
        prev = now[sid] if sid in now else old(sid)
        now[sid] = new
        ds += (new is S.SUCCEEDED) - (prev is S.SUCCEEDED)
        db += (new in BAD) - (prev in BAD)
        if new is S.SUCCEEDED and prev is not S.SUCCEEDED:
            succeeded.append(sid)
    return ds, db, succeeded


def _head(row: dict[str, Any]) -> ExecutionHead:
    from backends.sql.flow_names import ExecutionHead, ExecutionReason, ExecutionState

    reason = row["reason"]
    return ExecutionHead(
        state=ExecutionState(row["state"]),
        max_parallel=row["max_parallel"],
        deadline_at=row["deadline_at"],
        reason=ExecutionReason(reason) if reason is not None else None,
        failed_step=row["failed_step"],
    )


class FastStepEnd(SQLBase):
    """Mixed into :class:`backends.sql.flows.SQLFlows` (its base class)."""

    def _release(
        self, cur: Any, eid: str, idxs: list[int], deadline: int | None, t: int
    ) -> dict[int, str]:  # pragma: no cover - SQLFlows'
        raise NotImplementedError

    def _promote(self, cur: Any, row: Row, t: int) -> list[ReapedJob]:  # pragma: no cover
        raise NotImplementedError

    def _lock_head(self, cur: Any, eid: str, *, key_held: bool = False) -> dict[str, Any] | None:
        """Lock an execution's concurrency key (unless held) and its row; the row
        (``None``: unknown id). The first locks of every flow transaction (design §4.2)."""
        if not key_held:
            row = cur.execute(self._q["flow_conc_key_of"], {"e": eid}).fetchone()
            if row is None:
                return None
            if row["conc_key"] is not None:
                cur.execute(self._q["flow_lock_key"], {"k": row["conc_key"]})
        x = cur.execute(self._q["flow_lock_execution"], {"e": eid}).fetchone()
        return {k: x[k] for k in x.keys()} if x is not None else None

    def _index(self, cur: Any, row: Row) -> StepIndex:
        """The step index of ``row``'s spec (read once per spec and process)."""
        from backends.sql.flow_names import step_index

        index = _indexes.get(row["spec_hash"])
        if index is None:
            found = cur.execute(self._q["flow_step_deps"], {"e": row["id"]}).fetchall()
            index = step_index([(r["step_id"], json.loads(r["deps"])) for r in found])
            if len(_indexes) >= _CACHE_MAX:
                _indexes.clear()
            _indexes[row["spec_hash"]] = index
        return index

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.flows.storage.SupportsFlows.get_step_inputs` (reads the
        results of the step's dependencies only)."""
        from backends.sql.flow_names import StepInputs

        with self._stmt() as cur:
            x = cur.execute(self._q["flow_get_execution"], {"e": execution_id}).fetchone()
            if x is None:
                raise NotFound(f"no flow execution with id {execution_id!r}")
            index = self._index(cur, x)
            i = index.pos.get(step_id)
            if i is None:
                raise NotFound(f"execution {execution_id} has no step {step_id!r}")
            deps = dict.fromkeys(index.depends_on[i])
            params = {"e": execution_id, "idxs": self._list([index.pos[d] for d in deps])}
            rows = cur.execute(self._q["flow_step_results"], params).fetchall() if deps else []
        got = {r["idx"]: r["result"] for r in rows}
        results = {d: _bytes(got[index.pos[d]]) for d in deps}
        return StepInputs(input=bytes(x["input"]), results=results)

    def _lower_unmet(self, cur: Any, eid: str, index: StepIndex, succeeded: list[str]) -> None:
        """One dependency fewer not succeeded, for the dependents of ``succeeded``."""
        for sid in succeeded:
            dependents = index.dependents[index.pos[sid]]
            if dependents:
                cur.execute(self._q["flow_lower_unmet"], {"e": eid, "idxs": self._list(dependents)})

    def _fast_ended(self, cur: Any, head: dict[str, Any], job_id: str, t: int) -> bool:
        """Decide and apply the end of step job ``job_id`` (changed in this transaction)
        on the fast path; ``False`` when it does not apply (nothing written: decide on
        the full view)."""
        from backends.sql.flow_names import STEP_STATES, S, step_ended_fast

        if (
            head["n_succeeded"] is None
            or head["n_bad"]
            or head["state"] != "running"
            or head["failed_step"] is not None
            or head["max_parallel"]
        ):
            return False
        job = cur.execute(self._q["flow_job_state"], {"id": job_id}).fetchone()
        state = STEP_STATES.get(job["state"]) if job is not None else None
        index = self._index(cur, head)
        i = index.pos.get(job["step_id"]) if job is not None else None
        if state not in (S.SUCCEEDED, S.QUEUED) or i is None:
            return False
        dependents = index.dependents[i] if state is S.SUCCEEDED else ()
        params = {"e": head["id"], "idxs": self._list([i, *dependents])}
        rows = {r["idx"]: r for r in cur.execute(self._q["flow_fast_steps"], params).fetchall()}
        own = rows.get(i)
        if own is None or own["job_id"] != job_id:
            return False
        deps: dict[str, tuple[StepState, int]] = {}
        for d in dependents:
            r = rows.get(d)
            if r is None or r["unmet"] is None:
                return False
            deps[index.ids[d]] = (STEP_STATES[r["state"]], r["unmet"])
        counts = {S.SUCCEEDED: head["n_succeeded"]}
        current = STEP_STATES[own["state"]]
        tr = step_ended_fast(_head(head), index, counts, index.ids[i], current, state, deps, t)
        if tr is None:
            return False
        self._apply_fast(cur, head, index, tr, job, t)
        return True

    def _fast_batch(
        self, cur: Any, head: dict[str, Any], ends: list[EndRow], t: int
    ) -> tuple[list[bool], list[str]] | None:
        """Several ends of one execution, all successes or retries of distinct jobs of a
        fast-path execution: fenced in one statement and folded through
        :func:`step_ended_fast` (each on the state the previous one left) into one write
        per table. ``(taken, job ids left for the full path)``; ``None``: not such a
        batch (nothing written; the caller takes them one by one)."""
        ids = [v.id for v in ends]
        if (
            len(ends) < 2
            or len(set(ids)) != len(ids)
            or any(v.state not in ("succeeded", "queued") for v in ends)
            or not _fast_head(head, t)
        ):
            return None
        taken = self._finish_batch(cur, ends, t)
        ended = [v for v in ends if v.id in taken]
        rest = self._fold(cur, head, ended, t) if ended else []
        return [v.id in taken for v in ends], rest

    def _fold(self, cur: Any, head: dict[str, Any], ended: list[EndRow], t: int) -> list[str]:
        """Decide and apply ``ended`` in order while :func:`step_ended_fast` applies; the
        job ids of the ends left for the full path."""
        index = self._index(cur, head)
        found = cur.execute(self._q["flow_jobs_of"], {"ids": self._list([v.id for v in ended])})
        pos = {r["id"]: index.pos.get(r["step_id"]) for r in found.fetchall()}
        wanted: dict[int, None] = {}
        for v in ended:
            i = pos.get(v.id)
            if i is not None:
                wanted[i] = None
                if v.state == "succeeded":
                    wanted.update(dict.fromkeys(index.dependents[i]))
        params = {"e": head["id"], "idxs": self._list(list(wanted))}
        rows = {r["idx"]: r for r in cur.execute(self._q["flow_fast_steps"], params).fetchall()}
        f = _Fold(head, index, rows, t)
        for k, v in enumerate(ended):
            if not f.step(v, pos.get(v.id)):
                self._write_fold(cur, head, f)
                return [u.id for u in ended[k:]]
        self._write_fold(cur, head, f)
        return []

    def _write_fold(self, cur: Any, head: dict[str, Any], f: _Fold) -> None:
        """What ``f`` folded: the execution, the unmet counters, the released jobs, the
        step rows; then ``head`` follows."""
        from backends.sql.flow_names import S

        if not f.rows:
            return
        eid, h = head["id"], f.head
        reason = h.reason.value if h.reason is not None else None
        cur.execute(self._q["flow_update_execution"], {
            "e": eid, "state": h.state.value, "reason": reason, "failed_step": None,
            "deadline_at": h.deadline_at, "started_at": None,
            "finished_at": f.t if f.finished else None, "ds": f.ds, "db": 0,
        })  # fmt: skip
        if f.lowered:
            lower = [{"e": eid, "idx": d, "n": n} for d, n in f.lowered.items()]
            cur.executemany(self._q["flow_lower_unmet_by"], lower)
        rows = f.rows
        if f.release:
            jobs = self._release(cur, eid, f.release, h.deadline_at, f.t)
            rows += [_step_row(eid, i, S.QUEUED, None, jobs[i], None) for i in f.release]
        cur.executemany(self._q["flow_update_step"], rows)
        head["state"], head["reason"] = h.state.value, reason
        head["n_succeeded"] += f.ds
        if f.finished:
            head["finished_at"] = f.t
            if head["conc_key"] is not None:
                self._promote(cur, head, f.t)

    def _apply_fast(
        self, cur: Any, head: dict[str, Any], index: StepIndex, tr: Transition, job: Row, t: int
    ) -> list[ReapedJob]:
        """Apply a transition of :func:`step_ended_fast` (one step ended, maybe some
        released, maybe the execution succeeded) as ``SQLFlows._apply`` would."""
        from backends.sql.flow_names import S

        eid = head["id"]
        ((sid, state),) = tr.ended
        result = job["result"] if state is S.SUCCEEDED else None
        rows = [_step_row(eid, index.pos[sid], state, job["reason"], None, result)]
        ds = 1 if state is S.SUCCEEDED else 0
        reason = tr.reason.value if tr.reason is not None else None
        cur.execute(self._q["flow_update_execution"], {
            "e": eid, "state": tr.state.value, "reason": reason, "failed_step": None,
            "deadline_at": tr.deadline_at, "started_at": None,
            "finished_at": t if tr.finished else None, "ds": ds, "db": 0,
        })  # fmt: skip
        if ds:
            self._lower_unmet(cur, eid, index, [sid])
        if tr.release:
            idxs = [index.pos[s] for s in tr.release]
            jobs = self._release(cur, eid, idxs, tr.deadline_at, t)
            rows += [_step_row(eid, i, S.QUEUED, None, jobs[i], None) for i in idxs]
        cur.executemany(self._q["flow_update_step"], rows)
        head["state"], head["reason"] = tr.state.value, reason
        head["n_succeeded"] += ds
        if tr.finished:
            head["finished_at"] = t
            if head["conc_key"] is not None:
                return self._promote(cur, head, t)
        return []


def _step_row(
    eid: str, idx: int, state: StepState, reason: str | None, job_id: str | None, result: Any
) -> dict[str, Any]:
    return {
        "e": eid,
        "idx": idx,
        "state": state.value,
        "reason": reason,
        "job_id": job_id,
        "result": _bytes(result),
    }


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


def _fast_head(head: dict[str, Any], t: int) -> bool:
    """The execution row allows the fast path (the rest is judged per event)."""
    deadline = head["deadline_at"]
    return (
        head["n_succeeded"] is not None
        and not head["n_bad"]
        and head["state"] == "running"
        and head["failed_step"] is None
        and not head["max_parallel"]
        and (deadline is None or t < deadline)
    )


class _Fold:
    """The ends of one batch folded on the state each left (as Redis's ``_fold``)."""

    def __init__(self, head: dict[str, Any], index: StepIndex, rows: dict[int, Any], t: int):
        from backends.sql.flow_names import STEP_STATES, S

        self.head, self.index, self.t, self.eid = _head(head), index, t, str(head["id"])
        self.counts = {S.SUCCEEDED: int(head["n_succeeded"])}
        self.states = {i: STEP_STATES[r["state"]] for i, r in rows.items()}
        self.jobs = {i: r["job_id"] for i, r in rows.items()}
        self.unmet = {i: r["unmet"] for i, r in rows.items()}
        self.rows: list[dict[str, Any]] = []
        self.lowered: dict[int, int] = {}
        self.release: list[int] = []
        self.ds = 0
        self.finished = False

    def step(self, v: EndRow, i: int | None) -> bool:
        """Fold one end; ``False`` when it needs the full view (nothing folded)."""
        from backends.sql.flow_names import STEP_STATES, ExecutionState, S, step_ended_fast

        if i is None or self.jobs.get(i) != v.id or self.head.state is not ExecutionState.RUNNING:
            return False
        index, state = self.index, STEP_STATES[v.state]
        dependents = index.dependents[i] if state is S.SUCCEEDED else ()
        if any(self.unmet.get(d) is None for d in dependents):
            return False
        deps = {index.ids[d]: (self.states[d], self.unmet[d]) for d in dependents}
        sid = index.ids[i]
        tr = step_ended_fast(
            self.head, index, self.counts, sid, self.states[i], state, deps, self.t
        )
        if tr is None:
            return False
        self.rows.append(_step_row(self.eid, i, state, v.reason, None, v.result))
        self.head = replace(self.head, state=tr.state, reason=tr.reason)
        self.finished = self.finished or tr.finished
        self.states[i] = state
        if state is S.SUCCEEDED:
            self.ds += 1
            self.counts[S.SUCCEEDED] += 1
            for d in dependents:
                self.unmet[d] -= 1
                self.lowered[d] = self.lowered.get(d, 0) + 1
        for r in tr.release:
            self.states[index.pos[r]] = S.QUEUED
            self.release.append(index.pos[r])
        return True

"""Reading flow executions on SQLite and PostgreSQL: records, steps, step inputs and a
workflow's whole state (one read each), and the per-process caches of specs.

:func:`index_of` is the step index every flow transaction reads first
(:meth:`backends.sql.flows.Flows.open`): a flow's comes from its spec, read once per
spec and process; a workflow's is that of its current steps, children included, read
every time (children are added at run time).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from backends.sql.records import Row, job_from_row
from backends.sql.store import Store
from queue_core.records.errors import NotFound
from queue_core.records.flows import ExecutionReason, ExecutionState, StepState
from queue_core.records.workflows import MemoRecord
from queue_core.rules.flows.decide import WORKFLOW
from queue_core.rules.flows.decide_fast import StepIndex, step_index
from queue_core.rules.paging import check_page
from queue_core.storage.flows import ExecutionRecord, StepInputs, StepRecord
from queue_core.storage.workflows import WorkflowState

__all__ = ["FlowReads", "index_of", "reason_of", "remember_index"]

_S, _E = StepState, ExecutionState
_CACHE_MAX = 4096
_indexes: dict[str, StepIndex] = {}
"""The :class:`StepIndex` of each flow spec by its hash (immutable: read once per process)."""
_specs: dict[str, str] = {}
"""Spec JSON by content hash (immutable)."""
_flow_specs: dict[str, str] = {}
"""The spec hash of each flow execution (not a workflow) whose step inputs this process
read: the next step's inputs are one statement, checked against the stored hash (an
execution id stored again after a prune may have another spec)."""


def _remember(cache: dict[str, Any], key: str, value: Any) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value


def remember_index(spec_hash: str, index: StepIndex) -> None:
    """Keep a flow spec's step index (a workflow's is never kept: it grows)."""
    if spec_hash not in _indexes:
        _remember(_indexes, spec_hash, index)


def index_of(cur: Any, q: Any, head: Any) -> StepIndex:
    """The step index of execution row ``head`` (see the module docstring)."""
    workflow = head["kind"] == WORKFLOW
    index = None if workflow else _indexes.get(head["spec_hash"])
    if index is None:
        found = cur.execute(q["flow_step_deps"], {"e": head["id"]}).fetchall()
        index = step_index([(r["step_id"], json.loads(r["deps"])) for r in found])
        if not workflow:
            _remember(_indexes, head["spec_hash"], index)
    return index


def reason_of(value: str | None) -> ExecutionReason | None:
    """An execution's stored reason."""
    return ExecutionReason(value) if value is not None else None


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


class FlowReads:
    """The read operations of :class:`~queue_core.storage.abilities.SupportsFlows` and
    ``workflow_state``, on ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.q = store.q

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_execution`."""
        with self.store.stmt() as cur:
            rows = cur.execute(self.q["flow_get_execution"], {"e": execution_id}).fetchall()
            return self._records(cur, rows)[0] if rows else None

    def list_executions(
        self,
        flow: str | None = None,
        state: ExecutionState | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[ExecutionRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_executions`."""
        limit, offset = check_page(limit, offset)
        params = {"flow": flow, "state": _E(state).value if state is not None else None,
                  "limit": max(limit, 0), "offset": max(offset, 0)}  # fmt: skip
        with self.store.stmt() as cur:
            rows = cur.execute(self.q["flow_list_executions"], params).fetchall()
            return self._records(cur, rows)

    def _records(self, cur: Any, rows: list[Row]) -> list[ExecutionRecord]:
        missing = sorted({r["spec_hash"] for r in rows} - _specs.keys())
        if missing:
            got = cur.execute(self.q["flow_spec_bodies"], {"hashes": self.store.array(missing)})
            for s in got.fetchall():
                _remember(_specs, s["hash"], s["body"])
        return [
            ExecutionRecord(
                id=r["id"], flow=r["flow"], state=_E(r["state"]), reason=reason_of(r["reason"]),
                failed_step=r["failed_step"], spec_hash=r["spec_hash"],
                spec_json=_specs[r["spec_hash"]], input=bytes(r["input"]),
                max_parallel=r["max_parallel"], timeout_ms=r["timeout_ms"],
                deadline_at=r["deadline_at"], created_at=r["created_at"],
                started_at=r["started_at"], finished_at=r["finished_at"], conc_key=r["conc_key"],
                kind=r["kind"] or "flow", parent_id=r["parent_id"], parent_idx=r["parent_idx"],
                awaiting=tuple(json.loads(r["awaiting"] or "[]")),
            )
            for r in rows
        ]  # fmt: skip

    def list_steps(self, execution_id: str) -> list[StepRecord]:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.list_steps`."""
        with self.store.stmt() as cur:
            return self._steps(cur, execution_id)

    def _steps(self, cur: Any, execution_id: str) -> list[StepRecord]:
        head = cur.execute(self.q["flow_get_execution"], {"e": execution_id}).fetchone()
        if head is None:
            return []
        index = index_of(cur, self.q, head)
        rows = cur.execute(self.q["flow_steps"], {"e": execution_id}).fetchall()
        out = []
        for r in rows:
            running = r["state"] == "queued" and r["job_state"] == "running"
            out.append(StepRecord(
                execution_id=execution_id, idx=r["idx"], step_id=index.ids[r["idx"]],
                state=_S.RUNNING if running else _S(r["state"]),
                reason=None if running else r["reason"], job_id=r["job_id"],
                depends_on=index.depends_on[r["idx"]],
            ))  # fmt: skip
        return out

    def get_step_inputs(self, execution_id: str, step_id: str) -> StepInputs:
        """See :meth:`queue_core.storage.abilities.SupportsFlows.get_step_inputs`: one
        statement once this process has read the execution (:data:`_flow_specs`); reads
        only finished, unchanging rows (no common snapshot needed, so SQLite reads
        without the write lock)."""
        with self.store.read() as cur:
            found = self._known(cur, execution_id, [step_id])
            if found is not None:
                return found[0]
            x = cur.execute(self.q["flow_get_execution"], {"e": execution_id}).fetchone()
            if x is None:
                raise NotFound(f"no flow execution with id {execution_id!r}")
            index = index_of(cur, self.q, x)
            if step_id not in index.pos:
                raise NotFound(f"execution {execution_id} has no step {step_id!r}")
            got = self._inputs(cur, execution_id, index, [step_id], None)
        if got is None:  # deleted since (pruned)
            raise NotFound(f"no flow execution with id {execution_id!r}")
        if x["kind"] != WORKFLOW:  # a workflow's steps grow: its index is read each time
            _remember(_flow_specs, execution_id, x["spec_hash"])
        return got[0]

    def get_step_inputs_batch(self, steps: Sequence[tuple[str, str]]) -> list[StepInputs | None]:
        """See :class:`queue_core.storage.abilities.SupportsStepInputsBatch`:
        one statement per execution this process has read, the others one by one."""
        out: list[StepInputs | None] = [None] * len(steps)
        by_eid: dict[str, list[int]] = {}
        for n, (eid, _) in enumerate(steps):
            by_eid.setdefault(eid, []).append(n)
        with self.store.read() as cur:
            for eid, ns in by_eid.items():
                found = self._known(cur, eid, [steps[n][1] for n in ns])
                if found is not None:
                    for n, got in zip(ns, found, strict=True):
                        out[n] = got
        for n, (eid, step_id) in enumerate(steps):
            if out[n] is None:
                with contextlib.suppress(NotFound):
                    out[n] = self.get_step_inputs(eid, step_id)
        return out

    def _known(self, cur: Any, eid: str, step_ids: list[str]) -> list[StepInputs] | None:
        """The inputs of ``step_ids`` by the step index kept for flow ``eid`` (one
        statement); ``None``: not kept, or it no longer matches what is stored."""
        sh = _flow_specs.get(eid)
        index = None if sh is None else _indexes.get(sh)
        if index is None or any(s not in index.pos for s in step_ids):
            return None
        return self._inputs(cur, eid, index, step_ids, sh)

    def _inputs(
        self, cur: Any, eid: str, index: StepIndex, step_ids: list[str], spec_hash: str | None
    ) -> list[StepInputs] | None:
        """Steps ``step_ids``' inputs by ``index`` (one statement); ``None``: no execution
        ``eid``, or (``spec_hash`` given) not a flow of that spec (an id stored again)."""
        pos, depends_on = index.pos, index.depends_on
        wanted = dict.fromkeys(d for s in step_ids for d in depends_on[pos[s]])
        params = {"e": eid, "idxs": self.store.array([pos[d] for d in wanted])}
        rows = cur.execute(self.q["flow_step_inputs"], params).fetchall()
        if not rows or (
            spec_hash is not None
            and (rows[0]["spec_hash"] != spec_hash or rows[0]["kind"] == WORKFLOW)
        ):
            return None
        got = {r["idx"]: r["result"] for r in rows}
        value = bytes(rows[0]["input"])
        return [
            StepInputs(input=value, results={d: _bytes(got.get(pos[d]))
                                             for d in dict.fromkeys(depends_on[pos[s]])})
            for s in step_ids
        ]  # fmt: skip

    def workflow_state(self, execution_id: str) -> WorkflowState | None:
        """See :meth:`queue_core.storage.abilities.SupportsWorkflows.workflow_state`: one
        read transaction (the execution, its steps, its memos, its step jobs)."""
        q = self.q
        with self.store.tx() as cur:
            rows = cur.execute(q["flow_get_execution"], {"e": execution_id}).fetchall()
            if not rows:
                return None
            execution = self._records(cur, rows)[0]
            steps = self._steps(cur, execution_id)
            memos = cur.execute(q["wf_memos"], {"e": execution_id}).fetchall()
            jobs = {
                r["id"]: job_from_row(r) for r in cur.execute(q["wf_jobs_of"], {"e": execution_id})
            }
        return WorkflowState(
            execution=execution,
            steps=steps,
            memos={
                m["key"]: MemoRecord(
                    key=m["key"], value=bytes(m["value"]), seq=m["seq"], at=m["at"]
                )
                for m in memos
            },
            jobs={
                s.idx: jobs[s.job_id] for s in steps if s.job_id is not None and s.job_id in jobs
            },
        )
